# deploy/prometheus: the scrape config, the recording rules and alerts, checked and unit-tested
# by promtool.
if(SIFT_PROMTOOL)
  set(prom_dir ${SIFT_DEPLOY_DIR}/prometheus)
  add_test(NAME DeployPrometheus.CheckConfig COMMAND ${SIFT_PROMTOOL} check config prometheus.yml
           WORKING_DIRECTORY ${prom_dir})
  add_test(NAME DeployPrometheus.TestRules COMMAND ${SIFT_PROMTOOL} test rules rules_test.yml
           WORKING_DIRECTORY ${prom_dir})
  set_tests_properties(DeployPrometheus.CheckConfig DeployPrometheus.TestRules
                       PROPERTIES LABELS integration)
endif()
