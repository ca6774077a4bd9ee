#include "nvrtc_jit.h"

#include <fmt/format.h>

#include "content_hash.h"
#include "embedded_files.h"

namespace ccc {

NvrtcOutput nvrtc_build(const NvrtcRequest& req) {
  NvrtcOutput out = nvrtc_compile(req);
  if (!out.ok) throw JitError(out.log);
  return out;
}

std::shared_ptr<const std::string> nvrtc_build_cached(JitCache& cache, const NvrtcRequest& req,
                                                      const std::function<void(const std::string&)>& load) {
  ContentHash key;
  key.add("nvrtc").add(nvrtc_version()).add(req.arch)
      .add(static_cast<uint64_t>(req.target)).add(req.source).add(device_prelude_hash());
  for (const std::string& o : req.options) key.add(o);
  const std::string what = fmt::format("nvrtc {} {} ({})", req.name, req.arch,
                                       req.target == NvrtcTarget::Cubin ? "cubin" : "ptx");
  return cache.get(key.hex(), what, [&] { return nvrtc_build(req).image; }, load).bytes;
}

}  // namespace ccc
