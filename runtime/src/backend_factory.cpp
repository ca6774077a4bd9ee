// The backends by name and kind: where a new backend joins the names the user types and the
// communicators that can be made on it (its class is a file of its own, behind backend.h).
#include <numeric>

#include <fmt/format.h>

#include "ccc/communicator.h"

namespace ccc {

namespace {

struct NamedBackend {
  BackendKind kind;
  const char* name;
};
constexpr NamedBackend kBackends[] = {{BackendKind::Host, "host"}, {BackendKind::Cuda, "cuda"}, {BackendKind::Sim, "sim"}};

}  // namespace

const char* backend_name(BackendKind kind) {
  for (const NamedBackend& b : kBackends)
    if (b.kind == kind) return b.name;
  return "unknown";
}

std::optional<BackendKind> backend_named(std::string_view name) {
  for (const NamedBackend& b : kBackends)
    if (name == b.name) return b.kind;
  return std::nullopt;
}

std::string backend_names() {
  std::string out;
  const size_t n = std::size(kBackends);
  for (size_t i = 0; i < n; ++i)
    out += fmt::format("{}\"{}\"", i == 0 ? "" : i + 1 == n ? " or " : ", ", kBackends[i].name);
  return out;
}

Communicator Communicator::create(BackendKind backend, int nranks, CommOptions options) {
  switch (backend) {
    case BackendKind::Host: return host(nranks, std::move(options));
    case BackendKind::Sim: return sim(nranks, std::move(options));
    case BackendKind::Cuda: {
      if (nranks < 1) throw Error(ErrorKind::InvalidArgument, fmt::format("need at least one rank, got {}", nranks));
      std::vector<int> devices(static_cast<size_t>(nranks));
      std::iota(devices.begin(), devices.end(), 0);
      return cuda(std::move(devices), std::move(options));
    }
  }
  throw Error(ErrorKind::InvalidArgument, "unknown backend");
}

Communicator Communicator::create_rank(BackendKind backend, const UniqueId& id, int nranks, int rank,
                                       CommOptions options, RankOptions rank_options) {
  switch (backend) {
    case BackendKind::Host: return host_rank(id, nranks, rank, std::move(options), rank_options);
    case BackendKind::Cuda: return cuda_rank(id, nranks, rank, std::move(options), rank_options);
    case BackendKind::Sim: break;
  }
  throw Error(ErrorKind::InvalidUsage, fmt::format("backend \"{}\" simulates every rank in one process: make them "
                                                   "together (Communicator::sim, cccCommInitAllHost)",
                                                   backend_name(backend)));
}

}  // namespace ccc
