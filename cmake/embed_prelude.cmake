# Writes OUT: a C++ source defining ccc::device_prelude_headers() from the headers in DIR, so
# NVRTC gets the prelude without reading the source tree at run time.
file(GLOB files ${DIR}/*.h)
set(body "")
foreach(path IN LISTS files)
  get_filename_component(name ${path} NAME)
  file(READ ${path} text)
  string(APPEND body "    {\"${name}\", R\"ccc_prelude(${text})ccc_prelude\"},\n")
endforeach()
file(WRITE ${OUT}.tmp "// Generated from runtime/device/*.h by cmake/embed_prelude.cmake.\n"
  "#include \"ccc/nvrtc_compile.h\"\n\nnamespace ccc {\n\n"
  "const std::vector<PreludeHeader>& device_prelude_headers() {\n"
  "  static const std::vector<PreludeHeader> headers = {\n${body}  };\n  return headers;\n}\n\n"
  "}  // namespace ccc\n")
file(COPY_FILE ${OUT}.tmp ${OUT} ONLY_IF_DIFFERENT)
