# deploy/docker: no Docker engine runs here, so the Dockerfiles are checked without one: hadolint,
# their structure, and that the runtime stage installs every shared library the built `sift`
# links (tests/deploy/docker_check.py); --self-test proves each check rejects a broken copy.
set(docker_check ${CMAKE_CURRENT_SOURCE_DIR}/docker_check.py
    --sift $<TARGET_FILE:sift> --hadolint ${PROJECT_SOURCE_DIR}/.venv/bin/hadolint)
add_test(NAME DeployDocker.Check COMMAND ${SIFT_DEPLOY_PYTHON} ${docker_check})
add_test(NAME DeployDocker.ChecksCanFail COMMAND ${SIFT_DEPLOY_PYTHON} ${docker_check} --self-test)
set_tests_properties(DeployDocker.Check DeployDocker.ChecksCanFail PROPERTIES LABELS integration)
