"""module_utils/acceptance/judgement.py and report.py: the site acceptance's judgement and its table and
JUnit XML.

The measurement itself runs for real in tests/unit/roles/test_acceptance_measure.py (gloo on loopback)."""

import copy
import sys
import xml.etree.ElementTree as ET

import pytest
from acceptance_helpers import MIB4, WORKERS, raw_result, slow_worker3
from ansible.module_utils.acceptance import judgement, report

SUCCEEDED = {"submission_id": "acc-measure", "state": "SUCCEEDED", "error": None}
SFT_OK = {"submission_id": "acc-sft", "state": "SUCCEEDED", "error": None}
IPS = [w["ip"] for w in WORKERS]


def verdict_of(raw, workers=WORKERS, measure=SUCCEEDED, sft=SFT_OK, **kw):
    return judgement.judge(judgement.parse_result(raw, [w["ip"] for w in workers]), workers, measure, sft, **kw)


def failed(verdict):
    return {(c["kind"], c["name"]) for c in verdict["checks"] if not c["ok"]}


def test_an_even_cluster_passes_with_its_table():
    verdict = verdict_of(raw_result(tflops=(0.05, 0.06, 0.055)))
    assert verdict["ok"] and verdict["failures"] == []
    assert verdict["medians"]["tflops"] == pytest.approx(0.055)
    assert verdict["medians"]["link"] == pytest.approx(MIB4 / 0.01 / 1e9)
    assert verdict["slowest"]["tflops"] == ("lab-worker1", 0.05)
    lines = report.table(verdict)
    assert lines[0].split() == ["host", "ip", "GPUs", "TFLOP/s", "alone", "GB/s", "lab-worker1", "GB/s",
                                "lab-worker2", "GB/s", "lab-worker3", "GB/s"]
    assert lines[1].split() == ["lab-worker1", "198.18.0.11", "0", "0.05", "-", "-", "0.419", "0.419"]
    assert lines[3].split()[:2] == ["lab-worker3", "198.18.0.13"] and lines[3].split()[-1] == "-"
    assert any(line.startswith("all 3 workers together (gloo, 4 MiB): 0.186 GB/s") for line in lines)
    assert any(line.startswith("slowest: matrix product lab-worker1 (0.05 TFLOP/s)") for line in lines)
    assert lines[-1] == "PASS: every check passed"


def test_a_rate_limited_worker_is_named_as_the_slow_node_and_the_common_node_of_the_slow_pairs():
    verdict = verdict_of(slow_worker3())
    assert not verdict["ok"]
    assert failed(verdict) == {("link", "lab-worker3"), ("pair", "lab-worker1-lab-worker3"),
                               ("pair", "lab-worker2-lab-worker3")}
    assert verdict["common_node"] == "lab-worker3" and verdict["slowest"]["link"][0] == "lab-worker3"
    # Its link is its best pair; the reference is the median link (the pairs' own median, 0.006, is slow itself).
    assert verdict["failures"][0].startswith("lab-worker3 (198.18.0.13): all-reduce bus bandwidth at most 0.00599 GB/s"
                                             " with any peer (best: lab-worker1), under 0.5 x the median link 0.419")
    assert "lab-worker3 is slow" in verdict["failures"][1]
    lines = report.table(verdict)
    assert "every slow pair includes lab-worker3" in lines
    assert lines[-1] == "FAIL: 3 check(s) failed"


def test_a_slow_link_between_two_good_nodes_is_named_as_a_link():
    raw = raw_result(tflops=(1, 1, 1, 1), pair_s={"0-1": 0.5, "0-2": 0.01, "0-3": 0.01, "1-2": 0.01, "1-3": 0.01,
                                                  "2-3": 0.01})
    verdict = verdict_of(raw, workers=[*WORKERS, {"host": "lab-worker4", "ip": "198.18.0.14"}])
    assert failed(verdict) == {("pair", "lab-worker1-lab-worker2")}
    assert "the link between lab-worker1 and lab-worker2 is slow" in verdict["failures"][0]
    assert verdict["common_node"] is None  # one slow pair: either end


def test_a_slow_matrix_product_fails_naming_the_node_and_passes_at_the_threshold():
    verdict = verdict_of(raw_result(tflops=(0.05, 0.05, 0.02)))
    assert failed(verdict) == {("matmul", "lab-worker3")}
    assert verdict["failures"] == [("lab-worker3 (198.18.0.13): matrix product 0.02 TFLOP/s, under 0.5 x the median "
                                   "0.05 TFLOP/s")]
    assert verdict_of(raw_result(tflops=(0.05, 0.05, 0.025)))["ok"]
    assert not verdict_of(raw_result(tflops=(0.05, 0.05, 0.03)), threshold=0.7)["ok"]


def test_gpus_are_held_to_ray_s_where_torch_has_cuda():
    assert verdict_of(raw_result(gpus=0, ray_gpus=4, cuda=None))["ok"]  # the lab: CPU torch, declared GPUs
    raw = raw_result(gpus=8, ray_gpus=8, cuda="12.8")
    raw["nodes"][1]["gpus"] = 7
    verdict = verdict_of(raw)
    assert failed(verdict) == {("gpus", "lab-worker2")}
    assert verdict["failures"] == ["lab-worker2 (198.18.0.12): torch sees 7 GPU(s), Ray gives the node 8"]
    assert not verdict_of(raw_result(gpus=0, ray_gpus=4), require_gpus=True)["ok"]


def test_an_intra_node_all_reduce_is_judged_against_the_other_nodes():
    raw = raw_result(gpus=8, ray_gpus=8, cuda="12.8")
    for node, seconds in zip(raw["nodes"], (0.001, 0.001, 0.004)):
        node["intra"] = {"ranks": 8, "bytes": 256 << 20, "seconds": seconds}
    verdict = verdict_of(raw)
    assert failed(verdict) == {("alone", "lab-worker3")}
    assert report.table(verdict)[1].split()[4] == "470"  # 256 MiB / 1 ms x 2 x 7/8


def test_a_missing_worker_a_failed_job_and_no_result_are_named():
    raw = raw_result(tflops=(0.05, 0.05))
    verdict = verdict_of(raw, sft={"submission_id": "acc-sft", "state": "FAILED", "error": "OOM"})
    assert failed(verdict) == {("workers", "every worker measured"), ("sft", "acc-sft")}
    assert verdict["failures"][0] == ("not measured (not an alive Ray worker node, or the job ended first): "
                                      "lab-worker3 (198.18.0.13)")
    assert verdict["failures"][1] == "acc-sft: FAILED: OOM"
    verdict = judgement.judge(None, WORKERS, {"submission_id": "acc-measure", "state": "FAILED",
                                               "error": "it left no result"}, None)
    assert ("measure", "acc-measure") in failed(verdict) and ("sft", "the SFT job") not in failed(verdict)
    assert verdict["failures"][0] == "acc-measure: FAILED: it left no result"
    assert report.table(verdict)[-1].startswith("FAIL")


def test_a_probe_error_after_the_matrix_products_keeps_them_and_fails_the_measurement():
    raw = raw_result(error="allreduce: gloo all-reduces: no answer within 300 s from node(s) 198.18.0.13")
    raw["allreduce"] = {"backend": "gloo", "rendezvous": "198.18.0.11:1", "ranks": [n["ip"] for n in raw["nodes"]]}
    verdict = verdict_of(raw, measure={"submission_id": "acc-measure", "state": "FAILED", "error": None})
    assert ("measure", "acc-measure") in failed(verdict) and ("all", "all workers") in failed(verdict)
    assert "no answer within 300 s from node(s) 198.18.0.13" in verdict["failures"][0]
    assert all(n["tflops"] == 0.05 for n in verdict["nodes"])


def test_an_sft_not_asked_for_is_skipped_not_failed():
    verdict = verdict_of(raw_result(tflops=(0.05, 0.05, 0.05)), sft=None)
    sft = next(c for c in verdict["checks"] if c["kind"] == "sft")
    assert verdict["ok"] and sft["ok"] and sft["skipped"] == "not asked (acceptance_sft=false)"


def test_one_or_two_workers_have_nothing_to_compare_links_with():
    one = verdict_of(raw_result(tflops=(0.05,)), workers=WORKERS[:1])
    assert one["ok"] and next(c for c in one["checks"] if c["kind"] == "all")["skipped"]
    assert verdict_of(raw_result(tflops=(0.05, 0.05), pair_s={"0-1": 5.0}), workers=WORKERS[:2])["ok"]


@pytest.mark.parametrize("mutate, field", [
    (lambda r: r.update(nodes="x"), "result.nodes"),
    (lambda r: r["nodes"][0].update(ip=None), "result.nodes[0].ip"),
    (lambda r: r["nodes"][0]["matmul"].update(tflops="1e9"), "result.nodes[0].matmul.tflops"),
    (lambda r: r["nodes"][0]["matmul"].update(tflops=float("nan")), "result.nodes[0].matmul.tflops"),
    (lambda r: r["nodes"][1].update(gpus=True), "result.nodes[1].gpus"),
    (lambda r: r["nodes"][1].update(ip="198.18.0.11"), "result.nodes"),
    (lambda r: r["allreduce"]["pairs"].update({"0-9": 1.0}), "result.allreduce.pairs"),
    (lambda r: r["allreduce"]["pairs"].update({"2-1": 1.0}), "result.allreduce.pairs"),
    (lambda r: r["allreduce"]["pairs"].update({"0-1": -1}), "result.allreduce.pairs[0-1]"),
    (lambda r: r["allreduce"].update(ranks=["x"]), "result.allreduce.ranks"),
    (lambda r: r["allreduce"].update(all={}), "result.allreduce.all"),
    (lambda r: r.update(allreduce=[1]), "result.allreduce"),
    (lambda r: r["nodes"][0].update(intra={"ranks": 1, "bytes": 1, "seconds": 1}), "result.nodes[0].intra.ranks"),
    # Numbers past every bound: an int no float holds (math.isfinite raised OverflowError on it), an infinity, a time
    # so short its bandwidth is infinite, a size or a count of any length.
    (lambda r: r["nodes"][0]["matmul"].update(tflops=10 ** 400), "result.nodes[0].matmul.tflops"),
    (lambda r: r["nodes"][0]["matmul"].update(tflops=1e41), "result.nodes[0].matmul.tflops"),
    (lambda r: r["nodes"][0].update(ray_gpus=-(10 ** 400)), "result.nodes[0].ray_gpus"),
    (lambda r: r["nodes"][0].update(gpus=10 ** 400), "result.nodes[0].gpus"),
    (lambda r: r["allreduce"]["pairs"].update({"0-1": 5e-324}), "result.allreduce.pairs[0-1]"),
    (lambda r: r["allreduce"]["pairs"].update({"0-1": 10 ** 400}), "result.allreduce.pairs[0-1]"),
    (lambda r: r["allreduce"].update(bytes=10 ** 400), "result.allreduce.bytes"),
    (lambda r: r["allreduce"].update(all=float("inf")), "result.allreduce.all"),
    (lambda r: r["nodes"][0].update(intra={"ranks": 10 ** 400, "bytes": 1, "seconds": 1}),
     "result.nodes[0].intra.ranks"),
    (lambda r: r["nodes"][0].update(intra={"ranks": 2, "bytes": 1, "seconds": 1e-300}),
     "result.nodes[0].intra.seconds"),
])
def test_a_result_of_another_shape_is_refused_naming_the_field(mutate, field):
    raw = copy.deepcopy(raw_result())
    mutate(raw)
    with pytest.raises(judgement.AcceptanceError) as err:
        judgement.parse_result(raw, IPS)
    assert str(err.value).startswith(field + ":")
    assert "1e9" not in str(err.value) and "0000" not in str(err.value)  # the field, never the value
    with pytest.raises(judgement.AcceptanceError, match="^result: must be a mapping"):
        judgement.parse_result([raw], IPS)


def test_the_largest_numbers_within_bounds_are_judged_and_printed():
    raw = raw_result(tflops=(1e40, 1e40, 1e-40), pair_s={"0-1": 1e-9, "0-2": 1e40, "1-2": 1e40})
    raw["allreduce"]["bytes"] = 2 ** 63 - 1
    verdict = verdict_of(raw)
    assert failed(verdict) == {("matmul", "lab-worker3"), ("link", "lab-worker3"), ("pair", "lab-worker1-lab-worker3"),
                               ("pair", "lab-worker2-lab-worker3")}
    assert report.table(verdict)[-1] == "FAIL: 4 check(s) failed"


def test_a_node_outside_the_inventory_is_refused_named_and_moves_nothing():
    """A result that adds nodes the inventory lacks (a worker of the inventory made slow by their pairs, the medians
    moved by their figures): they are left out, every judgement is the inventory's nodes' alone, and one failing check
    names them."""
    raw = raw_result(tflops=(0.05, 0.05, 0.05, 100.0, 100.0, 0.001),
                     pair_s={"0-1": 0.01, "0-2": 0.01, "1-2": 0.01, "0-3": 0.0001, "1-3": 0.0001, "2-3": 0.0001,
                             "0-4": 0.0001, "1-4": 0.0001, "2-4": 0.0001, "3-4": 0.0001, "0-5": 9.0, "3-5": 1.0})
    raw["nodes"][3]["ip"], raw["nodes"][4]["ip"] = "10.9.9.9", "evil\x1b]52;c;AAAA\x07\nname"
    raw["allreduce"]["ranks"] = [n["ip"] for n in raw["nodes"]]
    parsed = judgement.parse_result(raw, IPS)
    assert [n["ip"] for n in parsed["nodes"]] == IPS and len(parsed["allreduce"]["pairs"]) == 3
    assert parsed["outside"] == ["10.9.9.9", "evil name", "198.18.0.16"] and parsed["outside_more"] == 0
    verdict = judgement.judge(parsed, WORKERS, SUCCEEDED, SFT_OK)
    assert verdict["failures"] == ["refused, not judged (not an inventory worker): 10.9.9.9, evil name, 198.18.0.16"]
    assert verdict["medians"]["tflops"] == 0.05 and verdict["slow_pairs"] == [] and verdict["common_node"] is None
    assert [n["host"] for n in verdict["nodes"]] == ["lab-worker1", "lab-worker2", "lab-worker3"]
    lines = report.table(verdict)
    assert len(lines[0].split()) == 6 + 2 * 3 and len(lines) == 1 + 3 + 5
    assert all("\x1b" not in line and "10.9.9.9" not in line for line in lines[:4])
    junit = ET.fromstring(report.junit(verdict, "a").split("\n", 1)[1])
    outside = [c for c in junit.findall("testcase") if c.get("name") == "only inventory workers measured"]
    assert outside[0].get("classname") == "acceptance.cluster" and outside[0].find("failure") is not None


def test_a_huge_crafted_result_gives_a_bounded_verdict_and_table():
    """Thousands of invented nodes and every pair among hundreds of them: the verdict and its table hold the inventory's
    three workers and their three pairs; the refused nodes are named at most NAMED_OUTSIDE times."""
    ips = IPS + [f"10.{i // 250}.{i % 250}.1" for i in range(judgement.MAX_NODES - 3)]
    raw = raw_result()
    raw["nodes"] += [{**raw["nodes"][0], "ip": ip, "hostname": "x" * 5000} for ip in ips[3:]]
    raw["allreduce"]["ranks"] = ips
    raw["allreduce"]["pairs"] = {f"{i}-{j}": 0.01 for i in range(300) for j in range(i + 1, 300)}
    parsed = judgement.parse_result(raw, IPS)
    assert len(parsed["nodes"]) == 3 and len(parsed["allreduce"]["pairs"]) == 3
    assert len(parsed["outside"]) == judgement.NAMED_OUTSIDE and parsed["outside_more"] == len(ips) - 3 - 8
    verdict = judgement.judge(parsed, WORKERS, SUCCEEDED, SFT_OK)
    assert len(verdict["checks"]) == 2 + 1 + 3 * 3 + 3 + 1 + 1  # jobs, workers and outside, per node, pairs, all
    assert verdict["failures"][0].endswith(f"and {len(ips) - 11} more") and len(verdict["failures"]) == 1
    lines = report.table(verdict)
    assert len(lines) == 9 and sum(map(len, lines)) < 2000
    with pytest.raises(judgement.AcceptanceError,
                       match=f"^result.nodes: must be a list of at most {judgement.MAX_NODES}"):
        judgement.parse_result({"nodes": raw["nodes"] + [raw["nodes"][0]]}, IPS)


def _traced_lines(fn, *args):
    """How many lines of this module's code fn runs (a loop's every turn counts): a count of work, never a time."""
    count = 0

    def tracer(frame, event, _arg):
        nonlocal count
        if frame.f_code.co_filename == judgement.__file__:
            if event == "line":
                count += 1
            return tracer
        return None

    sys.settrace(tracer)
    try:
        fn(*args)
    finally:
        sys.settrace(None)
    return count


def test_the_judgement_is_linear_in_the_pairs():
    """16 workers have 120 pairs and 64 have 2016 (x16.8): the judgement's work grows with the pairs (here x13), not
    with the nodes times the pairs (x67; the loop that did that gave x34), which made a crafted result take minutes."""
    def work(n):
        workers = [{"host": f"w{i}", "ip": f"10.0.{i}.1"} for i in range(n)]
        raw = raw_result(tflops=(1.0,) * n)
        for node, worker in zip(raw["nodes"], workers):
            node["ip"] = worker["ip"]
        raw["allreduce"]["ranks"] = [w["ip"] for w in workers]
        # Some pairs slow (one in seven), so the slow pairs' checks run too.
        raw["allreduce"]["pairs"] = {f"{i}-{j}": 1.0 if (i + j) % 7 == 0 else 0.01 * (1 + (i + j) % 3)
                                     for i in range(n) for j in range(i + 1, n)}
        parsed = judgement.parse_result(raw, raw["allreduce"]["ranks"])
        return _traced_lines(judgement.judge, parsed, workers, SUCCEEDED, SFT_OK)

    small, large = work(16), work(64)
    assert large / small < 25, (small, large)


def test_junit_is_well_formed_with_one_testcase_per_check():
    verdict = verdict_of(slow_worker3(), sft={"submission_id": "acc-sft", "state": "FAILED", "error": "a <b> & 'c'"})
    text = report.junit(verdict, "acceptance-1")
    suite = ET.fromstring(text.split("\n", 1)[1])
    cases = suite.findall("testcase")
    assert suite.get("tests") == str(len(cases)) == str(len(verdict["checks"]))
    assert suite.get("failures") == "4"
    names = [(c.get("classname"), c.get("name")) for c in cases]
    assert ("acceptance.allreduce_node", "lab-worker3") in names and ("acceptance.matmul", "lab-worker1") in names
    assert ("acceptance.allreduce_pair", "lab-worker1-lab-worker3") in names
    slow = [c for c in cases if c.get("name") == "lab-worker3" and c.get("classname") == "acceptance.allreduce_node"]
    assert slow[0].find("failure").get("type") == "SLOW"
    sft = next(c for c in cases if c.get("classname") == "acceptance.job" and c.get("name") == "acc-sft")
    assert sft.find("failure").get("message") == "acc-sft: FAILED: a <b> & 'c'"


def test_bus_bandwidth_is_nccl_tests_busbw():
    assert judgement.bus_bandwidth(1e9, 1.0, 2) == pytest.approx(1.0)
    assert judgement.bus_bandwidth(1e9, 1.0, 4) == pytest.approx(1.5)
    assert judgement.result_path("/private", "a-measure") == \
        "/private/jobs/a-measure/checkpoints/acceptance/acceptance.json"
