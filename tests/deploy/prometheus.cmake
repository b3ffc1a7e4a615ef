# deploy/prometheus: the scrape config, the recording rules and alerts, checked and unit-tested
# by promtool.
set(prom_dir ${SIFT_DEPLOY_DIR}/prometheus)
# Through sh so that a missing promtool says what to do (ctest itself would only say "not found").
foreach(check "CheckConfig;check config prometheus.yml" "TestRules;test rules rules_test.yml")
  list(GET check 0 name)
  list(GET check 1 args)
  add_test(NAME DeployPrometheus.${name}
           COMMAND sh -c "command -v ${SIFT_PROMTOOL} >/dev/null || { echo '${SIFT_PROMTOOL} not found on PATH: install it (make deps)' >&2; exit 1; }; exec ${SIFT_PROMTOOL} ${args}"
           WORKING_DIRECTORY ${prom_dir})
endforeach()
set_tests_properties(DeployPrometheus.CheckConfig DeployPrometheus.TestRules
                     PROPERTIES LABELS integration)
