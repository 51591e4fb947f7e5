# Read by ctest after the discovered tests, before the add_test() ones of tests/CMakeLists.txt
# (which set their COST there). COST makes `ctest -j` start the longest tests first: a clean
# checkout has no timings of an earlier run, and without them a 100-second test that starts last
# leaves the other cores idle while it finishes. The figures are seconds on a 2-core machine, the
# largest of the plain, emulation and ASan builds; a name that a build does not have is ignored.
# (A value-parameterised test's ctest name ends in its parameter: keep the long ones plain.)
set(octet_test_costs
    "GPTTraining.LossFallsAndFp8EndsWithinTenPercentOfF32=26"
    "CudaTraining.GptLossFallsOnTheGpuAndTracksTheCpuInF32=20"
    "CudaTraining.GptLossFallsOnTheGpuAndTracksTheCpuUnderDelayedScaling=20"
    "CudaTraining.GptLossFallsOnTheGpuAndTracksTheCpuUnderCurrentScaling=25"
    "CudaTraining.GptLossFallsOnTheGpuAndTracksTheCpuUnderMxfp8=30"
    "Fp8Exhaustive.ToE2m1MatchesCudaOnAllFloats=16"
    "Fp8Exhaustive.ToE4m3MatchesCudaOnAllFloats=12"
    "Fp8Exhaustive.ToE5m2MatchesCudaOnAllFloats=12"
    "Fp8Exhaustive.ToF16MatchesCudaOnAllFloats=12"
    "Fp8Exhaustive.ToE8m0MatchesCudaOnAllFloats=11"
    "Fp8Exhaustive.ToBf16MatchesCudaOnAllFloats=10"
    "Gemm.TiledShapesMatchF64AndGiveTheSameBitsOnAnyThreadCount=9"
    "Trainer.OneAndTwoThreadsGiveTheSameBitsAndAResumeMayChangeTheCount=6"
    "CudaHostSync.TrainingStepMakesNoStreamWaitOrBlockingUpload=5")
foreach(entry IN LISTS octet_test_costs)
  string(REPLACE "=" ";" parts "${entry}")
  list(GET parts 0 name)
  list(GET parts 1 cost)
  set_tests_properties("${name}" PROPERTIES COST ${cost})
endforeach()
