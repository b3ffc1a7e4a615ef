# deploy/grafana: the dashboard (structure, grid, units, variables), every query parsed by
# promtool after variable substitution, every metric name exported by sift or defined by a
# recording rule, the provisioning files; and the checker's own negative tests (mutated copies
# of the dashboard are rejected). tests/integration/dashboard_queries_slow_test.cc runs the queries
# against a real Prometheus scraping a cluster.
# The venv's Python (PyYAML; `make deps` makes it, also after cmake ran: not looked up here).
set(grafana_python ${SIFT_DEPLOY_PYTHON})
add_test(NAME DeployGrafana.CheckDashboard
         COMMAND ${grafana_python} ${CMAKE_CURRENT_SOURCE_DIR}/grafana_check.py
                 --dashboard ${SIFT_DEPLOY_DIR}/grafana/dashboards/sift.json
                 --prometheus-dir ${SIFT_DEPLOY_DIR}/prometheus
                 --sources ${PROJECT_SOURCE_DIR} --promtool ${SIFT_PROMTOOL})
add_test(NAME DeployGrafana.CheckerRejectsBrokenDashboards
         COMMAND ${grafana_python} ${CMAKE_CURRENT_SOURCE_DIR}/grafana_check_test.py)
set_tests_properties(DeployGrafana.CheckerRejectsBrokenDashboards PROPERTIES
                     ENVIRONMENT SIFT_PROMTOOL=${SIFT_PROMTOOL})
set_tests_properties(DeployGrafana.CheckDashboard DeployGrafana.CheckerRejectsBrokenDashboards
                     PROPERTIES LABELS integration)
