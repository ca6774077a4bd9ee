# Fails if any of FILES (|-separated) lists NVRTC among its needed libraries: ccc opens it with
# dlopen (nvrtc_library.h), so that its binaries start where only another CUDA's NVRTC, or a
# wheel's, or none is installed.
#   cmake -DREADELF=... -DFILES=a|b|c -P no_nvrtc_needed.cmake
string(REPLACE "|" ";" files "${FILES}")
foreach(f IN LISTS files)
  if(f STREQUAL "")
    continue()
  endif()
  execute_process(COMMAND ${READELF} --dynamic ${f} OUTPUT_VARIABLE dynamic COMMAND_ERROR_IS_FATAL ANY)
  if(dynamic MATCHES "NEEDED[^\n]*libnvrtc")
    message(FATAL_ERROR "${f} links NVRTC at load time; it must be opened with dlopen:\n${dynamic}")
  endif()
  message(STATUS "${f}: no NVRTC among its needed libraries")
endforeach()
