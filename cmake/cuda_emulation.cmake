# OCTET_CUDA_EMULATION: the CUDA backend built for the CPU, so that its kernels and dispatch run in
# CI without a GPU (tests/cuda_emu/README.md). Every kernels/cuda/*.cu and *.cuh is copied to C++
# by octet_cuda_translate (launches and extern __shared__ rewritten, line numbers kept) and
# compiled by the C++ compiler against tests/cuda_emu/include, a shim of the CUDA runtime, the
# device built-ins and cuBLASLt; runtime.cpp, device_memory.cpp, exec.cpp, fiber.cpp and
# cublaslt.cpp implement them (fibers for GPU threads). cuDNN is not emulated: its attention
# reports every shape unsupported. The build defines OCTET_WITH_CUDA=1 and OCTET_CUDA_EMULATION=1
# and reports one emulated device, so `ctest -L cuda` runs tests/cuda for real. Mutually exclusive
# with a real CUDA build.
option(OCTET_CUDA_EMULATION "Build the CUDA backend for the CPU (emulated device, for tests)" OFF)

if(OCTET_CUDA_EMULATION)
  if(CMAKE_CUDA_COMPILER_LOADED)
    message(FATAL_ERROR "OCTET_CUDA_EMULATION=ON cannot be combined with a real CUDA build")
  endif()
  message(STATUS "octet: CUDA emulation on the CPU (no GPU code is built)")
  set(OCTET_CUDA_EMU_DIR "${CMAKE_SOURCE_DIR}/tests/cuda_emu")
  set(OCTET_CUDA_EMU_GEN "${CMAKE_BINARY_DIR}/cuda_emu")
  # Symbols in backtraces of the emulator's fault reports.
  set(CMAKE_ENABLE_EXPORTS ON)
  add_executable(octet_cuda_translate "${OCTET_CUDA_EMU_DIR}/translate.cpp")
endif()

# octet_cuda_emulation_translate(<list var>): replaces the .cu files in the list by their
# translations (generated in the build tree), drops the cuDNN sources (attention_cudnn.cu for its
# stand-in, cudnn_graph_builder.cu), and translates kernels/cuda/*.cuh beside them (found first
# through -iquote). Called from kernels/CMakeLists.txt.
function(octet_cuda_emulation_translate var)
  set(out "")
  # cuDNN cannot be emulated: these include its headers and are not built; attention_cudnn_emu.cpp
  # stands in for attention_cudnn.cu's entry points.
  set(cudnn_sources attention_cudnn cudnn_graph_builder)
  file(GLOB headers CONFIGURE_DEPENDS "${CMAKE_SOURCE_DIR}/kernels/cuda/*.cuh")
  set(generated_headers "")
  foreach(h IN LISTS headers)
    get_filename_component(name "${h}" NAME)
    set(g "${OCTET_CUDA_EMU_GEN}/kernels/cuda/${name}")
    add_custom_command(OUTPUT "${g}"
                       COMMAND "${CMAKE_COMMAND}" -E make_directory "${OCTET_CUDA_EMU_GEN}/kernels/cuda"
                       COMMAND octet_cuda_translate "${h}" "${g}"
                       DEPENDS "${h}" octet_cuda_translate
                       COMMENT "Translating ${name} for the CUDA emulator" VERBATIM)
    list(APPEND generated_headers "${g}")
  endforeach()
  foreach(cu IN LISTS ${var})
    get_filename_component(name "${cu}" NAME_WE)
    if(name IN_LIST cudnn_sources)
      if(name STREQUAL "attention_cudnn")
        list(APPEND out "${OCTET_CUDA_EMU_DIR}/attention_cudnn_emu.cpp")
      endif()
      continue()
    endif()
    set(g "${OCTET_CUDA_EMU_GEN}/kernels/cuda/${name}.cu.cpp")
    add_custom_command(OUTPUT "${g}"
                       COMMAND "${CMAKE_COMMAND}" -E make_directory "${OCTET_CUDA_EMU_GEN}/kernels/cuda"
                       COMMAND octet_cuda_translate "${cu}" "${g}"
                       DEPENDS "${cu}" octet_cuda_translate ${generated_headers}
                       COMMENT "Translating ${name}.cu for the CUDA emulator" VERBATIM)
    set_source_files_properties("${g}" PROPERTIES COMPILE_OPTIONS "-iquote;${OCTET_CUDA_EMU_GEN}")
    list(APPEND out "${g}")
  endforeach()
  set(${var} ${out} ${generated_headers} PARENT_SCOPE)
endfunction()

# octet_cuda_emulation_runtime(<target>): links the emulated CUDA runtime and cuBLASLt into the
# runtime layer and puts the shim headers first on the include path of everything that uses it.
# Called from runtime/CMakeLists.txt.
function(octet_cuda_emulation_runtime target)
  target_sources(${target} PRIVATE "${OCTET_CUDA_EMU_DIR}/runtime.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/device_memory.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/exec.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/fiber.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/cublaslt.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/traffic.cpp"
                                   "${OCTET_CUDA_EMU_DIR}/graph.cpp")
  target_include_directories(${target} BEFORE PUBLIC
                             "$<BUILD_INTERFACE:${OCTET_CUDA_EMU_DIR}/include>")
  target_compile_definitions(${target} PUBLIC OCTET_CUDA_EMULATION=1)
endfunction()

# The emulator's own tests (tests/cuda_emu/selftest.cpp), added once tests/ has enabled testing.
function(octet_cuda_emulation_selftest)
  if(NOT OCTET_BUILD_TESTS)
    return()
  endif()
  find_package(GTest REQUIRED)
  include(GoogleTest)
  set(g "${OCTET_CUDA_EMU_GEN}/selftest_kernels.cu.cpp")
  add_custom_command(OUTPUT "${g}"
                     COMMAND octet_cuda_translate "${OCTET_CUDA_EMU_DIR}/selftest_kernels.cu" "${g}"
                     DEPENDS "${OCTET_CUDA_EMU_DIR}/selftest_kernels.cu" octet_cuda_translate
                     COMMENT "Translating selftest_kernels.cu for the CUDA emulator" VERBATIM)
  add_executable(octet_cuda_emu_selftest "${OCTET_CUDA_EMU_DIR}/selftest.cpp"
                                         "${OCTET_CUDA_EMU_DIR}/traffic_selftest.cpp"
                                         "${OCTET_CUDA_EMU_DIR}/graph_selftest.cpp" "${g}")
  target_include_directories(octet_cuda_emu_selftest PRIVATE "${CMAKE_SOURCE_DIR}")
  target_link_libraries(octet_cuda_emu_selftest PRIVATE octet::octet GTest::gtest GTest::gtest_main)
  gtest_discover_tests(octet_cuda_emu_selftest DISCOVERY_TIMEOUT 60 PROPERTIES LABELS cuda_emu)
endfunction()
if(OCTET_CUDA_EMULATION)
  cmake_language(DEFER CALL octet_cuda_emulation_selftest)
endif()
