# Fails, listing the files, when clang-format would change any C++ source of the project.
file(GLOB_RECURSE sources RELATIVE "${ROOT}"
     "${ROOT}/runtime/*.h" "${ROOT}/runtime/*.cpp" "${ROOT}/kernels/*.h" "${ROOT}/kernels/*.cpp"
     "${ROOT}/kernels/*.cu" "${ROOT}/kernels/*.cuh" "${ROOT}/autograd/*.h" "${ROOT}/autograd/*.cpp" "${ROOT}/modules/*.h"
     "${ROOT}/modules/*.cpp" "${ROOT}/train/*.h" "${ROOT}/train/*.cpp" "${ROOT}/tools/*.h"
     "${ROOT}/tools/*.cpp" "${ROOT}/tests/*.h"
     "${ROOT}/tests/*.cpp" "${ROOT}/bench/*.cpp" "${ROOT}/fuzz/*.h" "${ROOT}/fuzz/*.cpp")
set(bad "")
foreach(f IN LISTS sources)
  execute_process(COMMAND "${CLANG_FORMAT}" --dry-run -Werror "${ROOT}/${f}"
                  RESULT_VARIABLE rc OUTPUT_QUIET ERROR_QUIET)
  if(NOT rc EQUAL 0)
    list(APPEND bad "${f}")
  endif()
endforeach()
if(bad)
  list(JOIN bad "\n  " text)
  message(FATAL_ERROR "clang-format would change:\n  ${text}\nrun: clang-format -i <file>")
endif()
