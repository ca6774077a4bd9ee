# Installs a ccc build into WORK_DIR/prefix, builds the outside project tests/install/consumer
# against it with find_package(ccc), and runs it. Everything it writes is under WORK_DIR.
#   cmake -DCCC_BUILD_DIR=... -DCONSUMER_SOURCE_DIR=... -DWORK_DIR=... -DCXX_COMPILER=...
#         -DCXX_FLAGS=... -DCUDA_ROOT=... -DREADELF=... [-DPYTHON=...] -P find_package_consumer.cmake
function(run)
  execute_process(COMMAND ${ARGV} COMMAND_ECHO STDOUT COMMAND_ERROR_IS_FATAL ANY)
endfunction()

file(REMOVE_RECURSE ${WORK_DIR})
set(prefix ${WORK_DIR}/prefix)
run(${CMAKE_COMMAND} --install ${CCC_BUILD_DIR} --prefix ${prefix})
# --no-as-needed: a libcuda.so the package config let through would show in the binary.
run(${CMAKE_COMMAND} -S ${CONSUMER_SOURCE_DIR} -B ${WORK_DIR}/build -DCMAKE_PREFIX_PATH=${prefix}
    -DCMAKE_CXX_COMPILER=${CXX_COMPILER} "-DCMAKE_CXX_FLAGS=${CXX_FLAGS}"
    -DCMAKE_EXE_LINKER_FLAGS=-Wl,--no-as-needed -DCUDAToolkit_ROOT=${CUDA_ROOT})
run(${CMAKE_COMMAND} --build ${WORK_DIR}/build)

set(consumer ${WORK_DIR}/build/ccc_consumer)
execute_process(COMMAND ${READELF} --dynamic ${consumer} OUTPUT_VARIABLE dynamic COMMAND_ERROR_IS_FATAL ANY)
if(dynamic MATCHES "libcuda\\.so")
  message(FATAL_ERROR "ccc_consumer links libcuda.so; the driver must be left to dlopen:\n${dynamic}")
endif()
run(${CMAKE_COMMAND} -E env CCC_CACHE_DIR=${WORK_DIR}/jit-cache ${consumer})

# A build with the Python package installs it whole (module and files) where PYTHONPATH finds it.
if(PYTHON)
  file(GLOB package ${prefix}/lib/python*/site-packages/ccc)
  if(NOT package)
    message(FATAL_ERROR "cmake --install put no Python package ccc under ${prefix}/lib/python*/site-packages")
  endif()
  get_filename_component(site ${package} DIRECTORY)
  run(${CMAKE_COMMAND} -E env PYTHONPATH=${site} ${PYTHON} -c
      "import ccc, numpy\nassert ccc.__file__.startswith('${site}'), ccc.__file__\nx = [numpy.ones(3, numpy.float32) for _ in range(2)]\nccc.Communicator(2).all_reduce(x)\nassert (x[1] == 2).all(), x")
endif()
