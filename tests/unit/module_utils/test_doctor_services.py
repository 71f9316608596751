"""doctor.services_check (doctor.yml): the head's services judged by their own roles run in check mode."""

from monitoring_filters import ray_doctor_services

from ansible.module_utils.node import doctor  # isort: skip


def test_a_folder_the_service_would_open_is_a_problem_naming_it_and_the_fix():
    line, problems = doctor.services_check("lab-head", {
        "TensorBoard": {"changed": False, "opened": []},
        "Prometheus": {"changed": True, "opened": ["/etc/ray-verl"]}})
    assert line == "services: TensorBoard: their users reach their files"
    assert problems == [("lab-head: Prometheus: its user cannot enter /etc/ray-verl, so it cannot read its files: "
                         "re-run up.yml (it gives those folders search permission)")]


def test_a_service_that_cannot_run_is_named_with_its_reason_and_one_turned_off_is_left_out():
    line, problems = doctor.services_check("h", {
        "TensorBoard": None, "Prometheus": {"failed": True, "msg": "ray_daemon x: user prometheus cannot enter\n/root"},
        "Other": {"skipped": True}})
    assert line == "" and problems == ["h: Prometheus: ray_daemon x: user prometheus cannot enter /root"]


def test_the_filter_adds_to_the_doctors_report():
    report = {"lines": ["table"], "problems": ["w1: clock"]}
    judged = ray_doctor_services(report, "h", {"Prometheus": {"opened": ["/etc/x"]}, "TensorBoard": {"opened": []}})
    assert judged["lines"] == ["table", "services: TensorBoard: their users reach their files"]
    assert judged["problems"][0] == "w1: clock" and judged["problems"][1].startswith("h: Prometheus: its user cannot")


def test_a_service_whose_package_is_missing_is_not_said_to_reach_its_files():
    line, problems = doctor.services_check("h", {"Prometheus": {"changed": True, "installed": "prometheus",
                                                                "opened": []}})
    assert line == "" and problems == [("h: Prometheus: its package prometheus is not installed: re-run up.yml "
                                        "(it installs it)")]
