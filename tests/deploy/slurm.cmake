# deploy/slurm: the real sbatch scripts run a 2-server, 2-worker job on a throwaway local Slurm
# cluster (slurmctld, two slurmd, munge; deploy/slurm/local-cluster.sh) started by the test:
#   DeploySlurm.HetJob    deploy/slurm/sift.sbatch as a heterogeneous job (GPU request off);
#                         then a size mismatch (exit 2), servers and workers that cannot start
#                         (exit 1)
#   DeploySlurm.OneGroup  deploy/slurm/sift-small.sbatch (one node group)
#   DeploySlurm.GpuRequest  sift.sbatch with its --gpus-per-task=1 on a node with 2 fake GPUs
#                         (device files): each worker task gets its own CUDA_VISIBLE_DEVICES
# Each also checks the workers' --threads and the Prometheus targets file (promtool check config
# with deploy/prometheus/prometheus.yml), and runs secured as shipped: TLS with mutual
# authentication on every role and the users' tokens on the coordinator (HetJob and GpuRequest
# with the security directory sift.sbatch makes for the job, OneGroup with local-cluster.sh's
# site directory), every role with its own certificate and nothing refused; HetJob also refuses
# a key readable by others (exit 2) and runs with SIFT_SECURITY=off, OneGroup refuses a reader's
# submission (exit 2). Each takes 10-16 s; needs Debian's slurmctld, slurmd,
# slurm-client and munge (`make deps`) and root (slurmd; the check fails without it). Free ports
# and a private temp dir: safe beside other tests (ctest -j).
foreach(mode hetjob small gpu)
  if(mode STREQUAL "hetjob")
    set(name DeploySlurm.HetJob)
  elseif(mode STREQUAL "small")
    set(name DeploySlurm.OneGroup)
  else()
    set(name DeploySlurm.GpuRequest)
  endif()
  add_test(NAME ${name}
           COMMAND bash ${CMAKE_CURRENT_SOURCE_DIR}/slurm_check.sh $<TARGET_FILE:sift>
                   ${SIFT_DEPLOY_DIR} ${mode} ${SIFT_PROMTOOL})
  set_tests_properties(${name} PROPERTIES LABELS "integration;slow" TIMEOUT 240)
endforeach()
