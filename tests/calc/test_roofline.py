"""The roofline (kvcalc/throughput.py, GpuFit.decode / prefill) and `kvcalc estimate --gpu` /
`kvcalc sweep`: the issue's worked example, hand-derived FLOPs and all-reduce times."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvcalc.calc import roofline
from kvcalc.calc.memory_plan import GpuFit, Layout
from kvcalc.cli import app
from kvcalc.load.gpus import get_gpu
from kvcalc.schema import ModelSpec

runner = CliRunner()

# huggingface.co/meta-llama/Llama-3.1-8B/blob/main/config.json
LLAMA_8B = ModelSpec(
    name="llama-3.1-8b",
    n_layers=32,
    n_heads=32,
    n_kv_heads=8,
    hidden_size=4096,
    vocab_size=128256,
    intermediate_size=14336,
    max_position_embeddings=131072,
)
# huggingface.co/meta-llama/Llama-3.1-70B/blob/main/config.json
LLAMA_70B = ModelSpec(
    name="llama-3.1-70b",
    n_layers=80,
    n_heads=64,
    n_kv_heads=8,
    hidden_size=8192,
    vocab_size=128256,
    intermediate_size=28672,
    max_position_embeddings=131072,
)
H100 = get_gpu("h100-sxm")


def test_worked_example_llama_8b_h100_32k() -> None:
    # weights 2 x 8,030,261,248 = 16,060,522,496 B; KV 2 x 32 layers x 8 heads x 128 x 2 B
    # = 131,072 B/token x 32,768 = 4,294,967,296 B; decode reads the embedding's one row, not
    # its 1,050,673,152 B table: 19,304,824,832 B / 3.35e12 B/s = 5.7626 ms
    p = GpuFit(LLAMA_8B, H100, Layout(bw_efficiency=1.0))
    st = p.decode(32768, 1)
    # the embedding table (128,256 x 4,096 x 2 B) is read as one row of 8,192 B
    assert st.bytes_read == 16_060_522_496 - 1_050_673_152 + 8_192 + 4_294_967_296
    assert st.memory_time_s == pytest.approx(5.7626e-3, rel=1e-4)
    assert st.bound == "memory" and st.step_time_s == st.memory_time_s
    # default bandwidth efficiency 0.8: 5.7626 / 0.8 = 7.2033 ms
    assert GpuFit(LLAMA_8B, H100).decode(32768, 1).step_time_s == pytest.approx(7.2033e-3, rel=1e-4)


def test_decode_flops() -> None:
    # matmuls: 2 x (8,030,261,248 - 525,336,576 embedding) = 15,009,849,344 per token;
    # attention: 32 layers x 2 x 32 heads x (128 + 128) x 32,768 tokens = 17,179,869,184
    st = GpuFit(LLAMA_8B, H100).decode(32768, 1)
    assert st.flops == 15_009_849_344 + 17_179_869_184
    assert st.compute_time_s == pytest.approx(st.flops / (989.4e12 * 0.5))


def test_compute_bound_at_large_batch() -> None:
    p = GpuFit(LLAMA_8B, H100, Layout(bw_efficiency=1.0, flops_efficiency=1.0))
    st = p.decode(128, 4096)
    assert st.bound == "compute" and st.step_time_s == st.compute_time_s


def test_allreduce_term_under_tp() -> None:
    # 2 all-reduces x 80 layers x batch 8 x 8192 x 2 B = 20,971,520 B; ring over 2 ranks:
    # 2 (2 - 1) / 2 x 20,971,520 / 450e9 (half of NVLink's 900 GB/s) = 46.60 us
    assert roofline.tp_allreduce_bytes(80, 8, 8192) == 20_971_520
    assert roofline.allreduce_time_s(20_971_520, 2, 900e9) == pytest.approx(46.603e-6, rel=1e-4)
    assert roofline.allreduce_time_s(20_971_520, 1, 900e9) == 0
    # 8 ranks: 2 x 7/8 = 1.75 x 20,971,520 / 450e9 = 81.55 us
    assert roofline.allreduce_time_s(20_971_520, 8, 900e9) == pytest.approx(81.555e-6, rel=1e-4)
    st = GpuFit(LLAMA_70B, H100, Layout(tp=2)).decode(8192, 8)
    assert st.comm_time_s == pytest.approx(46.603e-6, rel=1e-4)
    assert st.step_time_s == pytest.approx(max(st.memory_time_s, st.compute_time_s) + st.comm_time_s)


def test_efficiency_scales_time() -> None:
    a = GpuFit(LLAMA_8B, H100, Layout(bw_efficiency=1.0)).decode(8192, 1).step_time_s
    b = GpuFit(LLAMA_8B, H100, Layout(bw_efficiency=0.5)).decode(8192, 1).step_time_s
    assert b == pytest.approx(2 * a)


@pytest.mark.parametrize(
    "p,w,pairs",
    [
        (4, None, 10),  # 1 + 2 + 3 + 4
        (4, 8, 10),  # window wider than the prompt
        (5, 2, 3 + 3 * 2),  # 1 + 2, then three tokens of 2
        (131072, None, 131072 * 131073 // 2),
    ],
)
def test_attended_pairs(p: int, w: int | None, pairs: int) -> None:
    assert roofline.attended_pairs(p, w) == pairs


def test_prefill_attention_is_quadratic() -> None:
    # prefill FLOPs = 2 x non-embedding weights x P + 32 x 2 x 32 x 256 x P (P + 1) / 2
    p = GpuFit(LLAMA_8B, H100)
    for P in (1024, 32768):
        assert p.prefill(P).flops == 15_009_849_344 * P + 524_288 * (P * (P + 1) // 2)
    assert p.prefill(32768).bound == "compute"


def test_experts_touched() -> None:
    assert roofline.expected_experts_touched(8, 2, 1) == pytest.approx(2)
    # 8 experts, 2 per token, 2 tokens: 8 x (1 - 0.75^2) = 3.5
    assert roofline.expected_experts_touched(8, 2, 2) == pytest.approx(3.5)
    assert roofline.expected_experts_touched(256, 8, 100_000) == pytest.approx(256)


def test_moe_decode_reads_active_experts_at_batch_1() -> None:
    # Mixtral (huggingface.co/mistralai/Mixtral-8x7B-v0.1 config.json): at batch 1 a step reads
    # the 12,879,925,248 active parameters x 2 B, plus the KV (32 x 2 x 8 x 128 x 2 B x 1024)
    mix = ModelSpec(
        name="mixtral",
        n_layers=32,
        n_heads=32,
        n_kv_heads=8,
        hidden_size=4096,
        vocab_size=32000,
        intermediate_size=14336,
        n_experts=8,
        n_experts_per_token=2,
    )
    p = GpuFit(mix, H100)
    # less the embedding table, plus one row (32,000 x 4,096 x 2 = 262,144,000 B; a row 8,192 B)
    assert p.decode(1024, 1).bytes_read == 2 * 12_879_925_248 - 262_144_000 + 8_192 + 131_072 * 1024
    # batch 64 touches all 8 experts (8 x (1 - 0.75^64) = 8.0000): the whole 46.7B
    # less the embedding table (32,000 x 4,096 x 2 B) but its 64 rows of 8,192 B
    assert p.decode(1024, 64).bytes_read == pytest.approx(
        2 * 46_702_792_704 - 262_144_000 + 64 * 8_192 + 131_072 * 1024 * 64, rel=1e-6
    )


def test_fp8_weights_use_fp8_peak() -> None:
    assert roofline.peak_flops_per_s(H100, "fp8_e4m3") == H100.fp8_flops_per_s
    assert roofline.peak_flops_per_s(get_gpu("a100-80gb-sxm"), "fp8_e4m3") == 312_000_000_000_000


def test_estimate_gpu_json_keys() -> None:
    r = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b",
            "--seq-len",
            "32k",
            "--gpu",
            "h100-sxm",
            "--bw-efficiency",
            "1",
            "--format",
            "json",
        ],
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    for key in (
        "kv_cache_bytes",
        "n_params",
        "n_active_params",
        "weights_bytes_per_gpu",
        "memory_bytes_per_gpu",
        "fits",
        "max_batch",
        "tpot_s",
        "tokens_per_s",
        "ttft_s",
    ):
        assert key in d
    assert d["kv_cache_bytes"] == 4_294_967_296
    assert d["n_params"] == 8_030_261_248 and d["weights_bytes_per_gpu"] == 16_060_522_496
    # one embedding row, not the table: 16,060,522,496 - 1,050,673,152 + 8,192 + 4,294,967,296
    assert d["decode_bytes_read_per_step"] == 19_304_824_832
    # the speed model of --engine ideal (floor 0) with the typed --bw-efficiency 1, 16-bit weights
    # (format factor 1), tp 1 (no all-reduce): 19,304,824,832 / 3.35e12 = 5.7626 ms
    assert d["tpot_s"] == pytest.approx(5.7626e-3, rel=1e-4)
    assert d["speed_model"].startswith("ideal on cuda: floor 0.00 ms/step, bw eff 1.00")
    assert d["fits"] is True
    # memory = weights + KV + activation reserve (8192 x (2 x 4096 + 2 x 14336) x 2 B
    # + 256 x 128256 x 4 B = 735,313,920) + CUDA context 500 MiB
    assert d["memory_bytes_per_gpu"] == 16_060_522_496 + 4_294_967_296 + 735_313_920 + 524_288_000


def test_estimate_count_sets_tp_and_table() -> None:
    r = runner.invoke(
        app, ["estimate", "llama-3.1-70b", "--seq-len", "8k", "--gpu", "h100-sxm", "--count", "2", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["tp"] == 2 and d["gpu_count"] == 2 and d["decode_allreduce_s"] > 0
    t = runner.invoke(app, ["estimate", "llama-3.1-8b", "--seq-len", "8k", "--gpu", "h100-sxm"])
    assert t.exit_code == 0 and "TPOT" in t.output and "fits" in t.output
    bad = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "h100-smx"])
    assert bad.exit_code == 2 and "h100-sxm" in bad.output
    eff = runner.invoke(app, ["estimate", "llama-3.1-8b", "--gpu", "h100-sxm", "--bw-efficiency", "1.5"])
    assert eff.exit_code == 2 and "--bw-efficiency" in eff.output


def test_sweep_table_and_json() -> None:
    r = runner.invoke(
        app,
        ["sweep", "llama-3.1-8b", "--seq-len", "1k,128k", "--batch", "1,32", "--gpu", "h100-sxm", "--format", "json"],
    )
    assert r.exit_code == 0, r.output
    rows = json.loads(r.output)
    assert [(x["seq_len"], x["batch"]) for x in rows] == [(1024, 1), (131072, 1), (1024, 32), (131072, 32)]
    assert rows[1]["kv_cache_bytes_per_gpu"] == 131_072 * 131_072
    assert rows[1]["fits"] is True and rows[3]["fits"] is False
    t = runner.invoke(app, ["sweep", "llama-3.1-8b", "--seq-len", "1k,8k", "--batch", "1"])
    assert t.exit_code == 0 and "1,024" in t.output


def test_sweep_plot(tmp_path) -> None:
    pytest.importorskip("matplotlib")
    out = tmp_path / "sweep.png"
    r = runner.invoke(
        app,
        [
            "sweep",
            "llama-3.1-8b",
            "--seq-len",
            "1k,8k,32k,128k",
            "--batch",
            "1,8,32",
            "--gpu",
            "h100-sxm",
            "--plot",
            str(out),
        ],
    )
    assert r.exit_code == 0, r.output
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 20_000


def test_sweep_plot_without_matplotlib(monkeypatch, tmp_path) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    r = runner.invoke(app, ["sweep", "llama-3.1-8b", "--plot", str(tmp_path / "x.png")])
    assert r.exit_code == 2 and "kvcalc[plot]" in r.output


def test_estimate_does_not_import_matplotlib() -> None:
    code = (
        "import sys; from kvcalc.cli import app; from typer.testing import CliRunner; "
        "r = CliRunner().invoke(app, ['estimate', 'llama-3.1-8b', '--gpu', 'h100-sxm', '-s', '8k']); "
        "assert r.exit_code == 0, r.output; "
        "print('matplotlib' in sys.modules, 'torch' in sys.modules)"
    )
    root = Path(__file__).resolve().parents[2]
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=root)
    assert out.stdout.split() == ["False", "False"]


@pytest.mark.parametrize("name", ["x.txt", "x.html", "x.png.bak"])
def test_sweep_plot_bad_extension_is_one_line(tmp_path, name: str) -> None:
    r = runner.invoke(app, ["sweep", "llama-3.1-8b", "--plot", str(tmp_path / name)])
    assert r.exit_code == 2, r.output
    assert r.output.count("error:") == 1 and "cannot write a ." in r.output and ".png" in r.output
    assert not (tmp_path / name).exists()


def test_sweep_plot_without_extension_is_refused(tmp_path) -> None:
    # issue 12 item 1: `--plot x` once wrote x.png, a name the user never typed (and could replace
    # a picture of that name); now the type must be in the name, and nothing is written
    (tmp_path / "x.png").write_bytes(b"a picture")
    r = runner.invoke(app, ["sweep", "llama-3.1-8b", "-s", "1k,8k", "--batch", "1", "--plot", str(tmp_path / "x")])
    assert r.exit_code == 2, r.output
    assert r.stderr.splitlines() == [
        f"error: --plot {tmp_path / 'x'}: give the file type in the name (x.png, or "
        ".svg, .pdf, ...): kvcalc writes only the name you give"
    ]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.png"]
    assert (tmp_path / "x.png").read_bytes() == b"a picture"


def test_estimate_count_without_gpu_sets_tp() -> None:
    # count 2 alone = tp 2: Llama-3.1-8B KV per GPU halves (4 of 8 KV heads per rank):
    # 8192 x 131,072 / 2 = 536,870,912 B
    r = runner.invoke(app, ["estimate", "llama-3.1-8b", "-s", "8k", "--count", "2", "--format", "json"])
    assert r.exit_code == 0, r.output
    d = json.loads(r.output)
    assert d["tp"] == 2 and d["kv_cache_bytes_per_gpu"] == 536_870_912


@pytest.mark.parametrize(
    "cmd,opts",
    [
        ("estimate", ["--weight-dtype", "fp8"]),
        ("estimate", ["--bw-efficiency", "0.9"]),
        ("estimate", ["--gpu-memory-utilization", "0.8", "--cuda-context", "1GiB"]),
        ("sweep", ["--flops-efficiency", "0.4"]),
        ("sweep", ["--activation-reserve", "2GiB"]),
    ],
)
def test_gpu_only_options_need_gpu(cmd: str, opts: list[str]) -> None:
    r = runner.invoke(app, [cmd, "llama-3.1-8b", "-s", "8k", *opts])
    assert r.exit_code == 2, r.output
    assert r.output.count("error:") == 1 and "need" in r.output and "--gpu" in r.output
    assert opts[0] in r.output


def test_sweep_weight_dtype_without_gpu_still_works() -> None:
    r = runner.invoke(
        app, ["sweep", "llama-3.1-8b", "-s", "1k", "--batch", "1", "--weight-dtype", "fp8", "--format", "json"]
    )
    assert r.exit_code == 0, r.output
    # fp8 decoder matrices 32 x 218,103,808 x 1 B = 6,979,321,856; bf16 layer norms 32 x 8192 x 2 B =
    # 524,288; bf16 embedding + head + final norm (2 x 128256 x 4096 + 4096) x 2 B = 2,101,354,496
    assert json.loads(r.output)[0]["weights_bytes_per_gpu"] == 6_979_321_856 + 524_288 + 2_101_354_496


@pytest.mark.parametrize(
    "cmd",
    [
        ["estimate", "llama-3.1-8b", "-s", "1M", "--gpu", "h100-sxm"],
        ["estimate", "llama-3.1-8b", "-s", "1M"],
        ["sweep", "llama-3.1-8b", "-s", "8k,1M,2M", "--batch", "1"],
    ],
)
def test_context_beyond_the_model_warns(cmd: list[str]) -> None:
    r = runner.invoke(app, cmd)
    assert r.exit_code == 0, r.output
    assert "warning:" in r.output and "max_position_embeddings (131,072)" in r.output
    assert "1,048,576" in r.output


@pytest.mark.parametrize(
    "value,ok",
    [("1.5", None), ("512", None), ("2GiB", 2**31), ("0", 0), ("1048576", 1_048_576), ("512MiB", 512 * 2**20)],
)
def test_activation_reserve_needs_a_unit(value: str, ok: int | None) -> None:
    r = runner.invoke(
        app,
        [
            "estimate",
            "llama-3.1-8b",
            "-s",
            "8k",
            "--gpu",
            "h100-sxm",
            "--activation-reserve",
            value,
            "--format",
            "json",
        ],
    )
    if ok is None:
        assert r.exit_code == 2 and "no unit" in r.output and "GiB" in r.output, r.output
    else:
        assert r.exit_code == 0, r.output
        assert json.loads(r.output)["activation_reserve_bytes"] == ok


def test_plot_labels_and_styles() -> None:
    from kvcalc.report.plot import _fmt_number, _fmt_tokens, _styles

    assert [_fmt_tokens(n) for n in (1024, 131072, 2**20, 2**21, 1000)] == ["1k", "128k", "1M", "2M", "1,000"]
    assert [_fmt_number(v) for v in (20, 50, 200, 5000, 20000)] == ["20", "50", "200", "5,000", "20k"]
    assert _fmt_number(500_000, short=False) == "500,000"
    plt = pytest.importorskip("matplotlib.pyplot")
    for n in (3, 12, 30):
        st = _styles(n, plt)
        assert len(st) == n and len({(str(c), ls) for c, ls in st}) == n


def test_sweep_plot_marks_contexts_beyond_the_model(tmp_path, monkeypatch) -> None:
    plt = pytest.importorskip("matplotlib.pyplot")
    seen = {}
    real_savefig = plt.Figure.savefig

    def spy(fig, *a, **k):
        seen["legend"] = [t.get_text() for lg in fig.legends for t in lg.get_texts()]
        seen["title"] = fig._suptitle.get_text()
        return real_savefig(fig, *a, **k)

    monkeypatch.setattr(plt.Figure, "savefig", spy)
    # the grid stops at the model's context unless asked: --beyond-context keeps 1M in the plot
    r = runner.invoke(
        app,
        [
            "sweep",
            "llama-3.1-8b",
            "-s",
            "8k,1M",
            "--batch",
            "1,8",
            "--beyond-context",
            "--plot",
            str(tmp_path / "p.png"),
        ],
    )
    assert r.exit_code == 0, r.output
    assert "beyond max_position_embeddings (128k)" in seen["legend"]
    assert "batch 1" in seen["legend"] and "tp 1" not in seen["title"]


@pytest.mark.parametrize(
    "cmd",
    [
        ["estimate", "llama-3.1-8b", "-s", "8k", "--batch", "100000000000000000000000"],
        ["sweep", "llama-3.1-8b", "--batch", "1,100000000000"],
        ["sweep", "llama-3.1-8b", "-s", "2000M"],
    ],
)
def test_absurd_sizes_are_refused(cmd: list[str]) -> None:
    r = runner.invoke(app, cmd)
    assert r.exit_code == 2 and r.output.count("error:") == 1 and "at most" in r.output, r.output
