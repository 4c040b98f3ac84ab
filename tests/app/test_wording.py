"""mcap.app.wording.plain: a data file's free text without the folders and scripts it names."""
import json

from mcap.app.wording import plain
from tests.conftest import DATA


def test_paths_and_scripts_leave_the_text_and_the_rest_stays():
    assert plain("one NVIDIA H100 shared by 4 CUDA stage processes (../shared/gpu-h100, "
                 "measured before history-free runs)") == \
        "one NVIDIA H100 shared by 4 CUDA stage processes (measured before history-free runs)"
    assert plain("reads 100% apart (../shared/gpu-h100/README.md), so it differs; "
                 "bench/bench_gpu_truth.py re-measures it.") == "reads 100% apart, so it differs."
    assert plain("AMD EPYC (AVX2, 1 thread), torch 2.13.0+cpu") == \
        "AMD EPYC (AVX2, 1 thread), torch 2.13.0+cpu"


def test_the_bundled_agreement_texts_come_out_plain():
    for path in DATA.glob("*.agreement.json"):
        record = json.loads(path.read_text())
        for key in ("a", "b", "note"):
            text = plain(record[key])
            assert "/" not in text.replace("CPU/GPU", "") and ".py" not in text, text
            assert len(text) > 10

