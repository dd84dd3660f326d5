# Aggregate targets, so a build can make just what it runs:
#   unit_tests  every test binary labelled `unit` (the sanitizer build)
#   integration_tests  every test binary labelled `integration` (the TSan build)
#   fuzzers     every libFuzzer target (with KUBETRAIN_FUZZ=ON)
if(NOT TARGET unit_tests)
  add_custom_target(unit_tests)
  add_custom_target(integration_tests)
  add_custom_target(fuzzers)
endif()

# The tests' own files need no optimisation: the code they check lives in the
# libraries they link, compiled with the build's flags. GoogleTest's macros make
# those files the slowest of the build to optimise (reconciler_test.cc: g++ -O3
# 25.7 s, -O1 17.6 s; clang++ with ThreadSanitizer -O1 18.6 s, -O0 10.6 s), so
# optimised builds compile them at -O1, and scripts/test.sh's ThreadSanitizer
# build at -O0. Empty: the build's own flags.
if(CMAKE_BUILD_TYPE MATCHES "^(Release|RelWithDebInfo|MinSizeRel)$")
  set(_kubetrain_test_cxx_flags_default "-O1")
else()
  set(_kubetrain_test_cxx_flags_default "")
endif()
set(KUBETRAIN_TEST_CXX_FLAGS "${_kubetrain_test_cxx_flags_default}" CACHE STRING
    "Compile flags for the test binaries' own files, after the build's (e.g. -O1)")

# kubetrain_test(NAME name LABELS unit|integration|gpu|bench SOURCES ... LIBS ...)
# One GoogleTest binary, its cases discovered by ctest and labelled; it links
# the test support library (common/testing/: temp dirs, child processes,
# wait-until).
function(kubetrain_test)
  cmake_parse_arguments(T "" "NAME;TIMEOUT" "LABELS;SOURCES;LIBS" ${ARGN})
  add_executable(${T_NAME} ${T_SOURCES})
  # A test's files share gtest, gmock, protobuf and absl headers, which cost
  # most of their compile time: compiled together they parse them once.
  set_target_properties(${T_NAME} PROPERTIES UNITY_BUILD ON UNITY_BUILD_BATCH_SIZE 8)
  if("unit" IN_LIST T_LABELS)
    add_dependencies(unit_tests ${T_NAME})
  endif()
  if("integration" IN_LIST T_LABELS)
    add_dependencies(integration_tests ${T_NAME})
  endif()
  target_link_libraries(${T_NAME} PRIVATE ${T_LIBS} kubetrain_test_support GTest::gmock
                                          GTest::gtest_main)
  if(KUBETRAIN_TEST_CXX_FLAGS)
    separate_arguments(_test_flags UNIX_COMMAND "${KUBETRAIN_TEST_CXX_FLAGS}")
    target_compile_options(${T_NAME} PRIVATE "$<$<COMPILE_LANGUAGE:CXX>:${_test_flags}>")
  endif()
  if(NOT T_TIMEOUT)
    set(T_TIMEOUT 300)
  endif()
  gtest_discover_tests(${T_NAME}
    PROPERTIES LABELS "${T_LABELS}" TIMEOUT ${T_TIMEOUT}
    DISCOVERY_TIMEOUT 60)
endfunction()

# kubetrain_fuzzer(NAME name SOURCES ... LIBS ...): a libFuzzer target, built
# only with KUBETRAIN_FUZZ=ON and clang.
function(kubetrain_fuzzer)
  cmake_parse_arguments(F "" "NAME" "SOURCES;LIBS" ${ARGN})
  if(NOT KUBETRAIN_FUZZ)
    return()
  endif()
  add_executable(${F_NAME} ${F_SOURCES})
  add_dependencies(fuzzers ${F_NAME})
  target_compile_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_options(${F_NAME} PRIVATE -fsanitize=fuzzer)
  target_link_libraries(${F_NAME} PRIVATE ${F_LIBS})
endfunction()
