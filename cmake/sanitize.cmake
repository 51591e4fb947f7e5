# Sanitizer and fuzzing builds (tools/sanitize.sh drives both; docs/dev/testing.md).
#
# OCTET_SANITIZE: a -fsanitize= list ("address,undefined", "thread"; empty: off) added to the
# compile and link of every target. UBSan findings are made fatal (-fno-sanitize-recover), so a
# test that triggers one fails instead of printing a line nobody reads.
#
# OCTET_FUZZ=ON (clang only): the libFuzzer harnesses of fuzz/. The layers holding the parsers are
# then compiled with -fsanitize=fuzzer-no-link (fuzz/CMakeLists.txt), which gives libFuzzer
# coverage inside the library; only the harness executables link the fuzzer runtime
# (-fsanitize=fuzzer), so the tests keep their own main.
set(OCTET_SANITIZE "" CACHE STRING
    "Sanitizers for every target, as -fsanitize= takes them: address,undefined | thread | empty")
option(OCTET_FUZZ "Build the libFuzzer harnesses in fuzz/ (clang)" OFF)

if(OCTET_SANITIZE)
  if(OCTET_WITH_CUDA AND NOT OCTET_CUDA_EMULATION)
    message(FATAL_ERROR "OCTET_SANITIZE is for CPU builds: configure with -DOCTET_CUDA=OFF")
  endif()
  set(octet_san_flags -fsanitize=${OCTET_SANITIZE} -fno-omit-frame-pointer)
  if(OCTET_SANITIZE MATCHES "undefined")
    list(APPEND octet_san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:CXX>:${octet_san_flags}>")
  add_link_options(${octet_san_flags})
  message(STATUS "octet: sanitizers ${OCTET_SANITIZE}")
endif()

if(OCTET_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "OCTET_FUZZ=ON needs clang (libFuzzer): -DCMAKE_CXX_COMPILER=clang++")
  endif()
  message(STATUS "octet: libFuzzer harnesses (fuzz/)")
endif()
