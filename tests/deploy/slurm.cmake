# deploy/slurm: the real sbatch scripts run a 2-server, 2-worker job on a throwaway local Slurm
# cluster (slurmctld, two slurmd, munge; deploy/slurm/local-cluster.sh) started by the test:
#   DeploySlurm.HetJob    deploy/slurm/sift.sbatch as a heterogeneous job (GPU request off)
#   DeploySlurm.OneGroup  deploy/slurm/sift-small.sbatch (one node group)
# Each takes ~15 s; needs Debian's slurmctld, slurmd, slurm-client and munge (`make deps`) and
# root (slurmd). Free ports and a private temp dir: safe beside other tests (ctest -j).
foreach(mode hetjob small)
  if(mode STREQUAL "hetjob")
    set(name DeploySlurm.HetJob)
  else()
    set(name DeploySlurm.OneGroup)
  endif()
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm_check.sh $<TARGET_FILE:sift>
                   ${SIFT_DEPLOY_DIR} ${mode})
  set_tests_properties(${name} PROPERTIES LABELS "integration;slow" TIMEOUT 240)
endforeach()
