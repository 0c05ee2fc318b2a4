"""The CPU tuner: the batch size with the best measured pages/s, and a core back to the feeders
only when the model waited for pages."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import localgpt_index.models.tuning as tuning


@pytest.fixture(autouse=True)
def steady_memory(monkeypatch, request):
    """Peak RSS does not move unless a test says so (larger batches then cost nothing); outside the
    real builds of the slow tier, the tuner's thread settings do not reach this process's torch."""
    monkeypatch.setattr(tuning, "peak_rss", lambda: 1_000_000)
    if request.node.get_closest_marker("slow") is None:
        monkeypatch.setattr(tuning, "set_threads", lambda n: None)


def _encoder():
    return SimpleNamespace(batch_size=4)


def _growing(kib_per_page: int):
    """Peak RSS that grows by `kib_per_page` for each page of the largest batch so far."""
    return lambda largest: 1_000_000 + kib_per_page * largest


class Clock:
    """The tuner's clock, moved by the test: the model's idle time is what the test says, not what a sleep took."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _run(tuner, encoder, seconds_per_page: dict[int, float], wait: float = 0.0, rss_kib=_growing(0),
         monkeypatch=None, clock: Clock | None = None) -> list[int]:
    """Run the trials; the batch sizes tried, in order (each once). With `clock` (the tuner's), the model
    waits `wait` seconds for each batch's pages, then encodes it. With `monkeypatch`, peak RSS is
    `rss_kib(largest batch so far)`."""
    tried: list[int] = []
    while not tuner.decided:
        size = encoder.batch_size
        tried.append(size)
        if monkeypatch is not None:
            peak = rss_kib(max(tried))
            monkeypatch.setattr(tuning, "peak_rss", lambda: peak)
        seconds = seconds_per_page[size] * size
        if clock is not None:
            tuner.waiting()  # as the engine calls it: idle from the end of one batch ...
            clock.now += wait + seconds  # ... until the next is encoded
        tuner.batch_done(size, seconds)
    return list(dict.fromkeys(tried))


@pytest.fixture
def four_cores(monkeypatch) -> list[int]:
    """Four CPUs, and the model thread counts the tuner sets, in order (nothing is set for real)."""
    threads: list[int] = []
    monkeypatch.setattr(tuning, "set_threads", threads.append)
    monkeypatch.setattr(tuning, "available_cpus", lambda: 4)
    return threads


@pytest.mark.parametrize("best", [1, 2, 4, 8])
def test_the_fastest_measured_batch_size_is_kept(monkeypatch, best):
    threads = []
    monkeypatch.setattr(tuning, "set_threads", threads.append)
    encoder = _encoder()
    tuner = tuning.CpuTuner(encoder, fixed_batch=False)
    rates = {size: (0.1 if size == best else 0.2) for size in tuning.CANDIDATES}
    _run(tuner, encoder, rates)
    assert encoder.batch_size == best and threads == []  # model-bound: every core stays with the model


def test_a_batch_shape_first_call_is_a_warm_up(monkeypatch):
    encoder = _encoder()
    tuner = tuning.CpuTuner(encoder, fixed_batch=False)
    first_call = set()
    while not tuner.decided:
        size = encoder.batch_size
        per_page = 0.1 if size == 4 else 0.2
        if size not in first_call:  # slow: one-time costs of a new shape
            first_call.add(size)
            per_page *= 50
        tuner.batch_done(size, per_page * size)
    assert encoder.batch_size == 4 and first_call == set(tuning.CANDIDATES)


def test_a_model_that_waits_for_pages_gives_a_core_back(four_cores):
    threads = four_cores
    encoder = _encoder()
    clock = Clock()
    tuner = tuning.CpuTuner(encoder, fixed_batch=False, clock=clock)
    _run(tuner, encoder, {size: 0.001 for size in tuning.CANDIDATES}, wait=0.01, clock=clock)
    assert threads == [3] and tuner.summary()["waited_share"] > tuning.WAIT_SHARE


def test_a_model_that_hardly_waits_keeps_every_core(four_cores):
    threads = four_cores
    encoder = _encoder()
    clock = Clock()
    tuner = tuning.CpuTuner(encoder, fixed_batch=False, clock=clock)
    _run(tuner, encoder, {size: 0.01 for size in tuning.CANDIDATES}, wait=0.0001, clock=clock)
    assert threads == [] and 0 < tuner.summary()["waited_share"] < tuning.WAIT_SHARE


def test_a_batch_size_given_by_the_user_is_kept(monkeypatch):
    encoder = _encoder()
    tuner = tuning.CpuTuner(encoder, fixed_batch=True)
    for _ in range(6):
        tuner.batch_done(4, 0.4)
    assert encoder.batch_size == 4


def test_one_lucky_batch_does_not_decide(monkeypatch):
    """A cheap model's batch of two pages: a warm-up, one batch that ran alone (10 ms a page), then
    the usual 50 ms with the feeders busy. Each trial averages several batches, so batches of 4
    (30 ms a page, steadily) win."""
    encoder = _encoder()
    tuner = tuning.CpuTuner(encoder, fixed_batch=False)
    calls: dict[int, list[float]] = {}
    while not tuner.decided:
        size = encoder.batch_size
        runs = calls.setdefault(size, [])
        per_page = {4: 0.03, 8: 0.035}.get(size) or (0.01 if len(runs) == 1 else 0.05)
        runs.append(per_page * size)
        tuner.batch_done(size, per_page * size)
    assert encoder.batch_size == 4
    for size, runs in calls.items():  # the warm-up, then TRIAL_SECONDS or TRIAL_PAGES, whichever comes first
        measured = len(runs) - 1
        assert sum(runs[1:]) >= tuning.TRIAL_SECONDS or measured * size >= tuning.TRIAL_PAGES, (size, runs)
        assert sum(runs[1:-1]) < tuning.TRIAL_SECONDS and (measured - 1) * size < tuning.TRIAL_PAGES, (size, runs)


def test_larger_batches_are_not_tried_once_they_stop_paying(monkeypatch):
    encoder = _encoder()
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, {1: 0.12, 2: 0.1, 4: 0.15, 8: 0.05})
    assert tried == [1, 2, 4]
    assert 8 not in tried and encoder.batch_size == 2  # 4 was slower than 2: 8 (more memory) is skipped


def test_a_larger_batch_that_neither_pays_nor_is_cheap_ends_the_trials(monkeypatch):
    """Model-bound (float32 on a 2-core AVX2 machine, the cpu checkpoint: 1 and 2 within the noise of
    each other, 2 costing about 60 MiB of activations more): batches of 2 run about as fast as 1 a
    page, and the doubling costs memory: 4 and 8 are not tried, and the faster of the two is kept."""
    encoder = _encoder()
    flat = {1: 0.172, 2: 0.170, 4: 0.165, 8: 0.150}
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, flat, rss_kib=_growing(100_000), monkeypatch=monkeypatch)
    assert tried == [1, 2] and encoder.batch_size == 2
    # the same timings without the memory growth: 4 and 8 are tried (and 8 wins)
    encoder = _encoder()
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, flat, rss_kib=_growing(0), monkeypatch=monkeypatch)
    assert tried == [1, 2, 4, 8] and encoder.batch_size == 8


def test_a_doubling_that_gains_a_few_percent_at_a_memory_cost_ends_the_trials(monkeypatch):
    """The cpu checkpoint in bfloat16 on a 2-core Zen 4: pages/s 6.97, 7.50, 8.06, 7.58 for 1, 2, 4, 8,
    peak RSS 913, 953, 1022, 1204 MiB. 4 is kept, and 8, which raised the peak by 18 % for nothing, is not tried."""
    encoder = _encoder()
    measured = {1: 1 / 6.97, 2: 1 / 7.50, 4: 1 / 8.06, 8: 1 / 7.58}
    # +40,000 KiB a page of batch: 1 -> 2 raises the peak 3.8 % (cheap), 2 -> 4 7.4 % for 7.5 % more pages/s
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, measured, rss_kib=_growing(40_000), monkeypatch=monkeypatch)
    assert tried == [1, 2, 4] and encoder.batch_size == 4


def test_the_page_queue_filling_during_the_first_trials_does_not_end_them(monkeypatch):
    """The ColQwen2.5 bench checkpoint: peak RSS rose 8-14 % during the first trials as the page
    queue filled, not for the batch. Growth counts from the start of each size's own trials: 4,
    which gained 6 % on 2 and cost nothing more during its trials, is followed by 8."""
    encoder = _encoder()
    measured = {1: 1 / 21.0, 2: 1 / 24.0, 4: 1 / 25.4, 8: 1 / 26.7}
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, measured, monkeypatch=monkeypatch,
                 rss_kib=lambda largest: 1_120_000)  # from 1,000,000 when the build began
    assert tried == [1, 2, 4, 8] and encoder.batch_size == 8


def test_a_larger_batch_that_pays_is_tried_at_a_memory_cost(monkeypatch):
    encoder = _encoder()
    rising = {1: 0.2, 2: 0.15, 4: 0.1, 8: 0.09}
    tuner = tuning.CpuTuner(encoder, fixed_batch=False)
    # +20,000 KiB a page: 4 is 6 % above the start (1's trials), 8 forecast at 14 % (under MEMORY_CAP)
    tried = _run(tuner, encoder, rising, rss_kib=_growing(20_000), monkeypatch=monkeypatch)
    assert tried[-1] == 8 and encoder.batch_size == 8
    # what each size cost is reported beside what it ran at (-v, and cpu_tuning in --json)
    assert tuner.summary()["peak_rss_mib_by_batch"] == {n: round((1_000_000 + 20_000 * n) / 1024) for n in (1, 2, 4, 8)}


def test_no_batch_is_tried_whose_forecast_memory_is_past_the_cap_however_much_it_pays(monkeypatch):
    """float32 on a 2-core AVX2 machine, the cpu checkpoint: pages/s 2.65, 3.37, 2.99 for 2, 4, 8 (a
    noisy trial of 2), peak RSS 1011, 1177, 1402 MiB from about 1000 before the trials (1 is put at
    2.60 pages/s and 1005 MiB). 4 "paid" 27 %, but 8 is forecast at 1177 + 2 x 166 MiB, 51 % above
    the start: it is not tried."""
    encoder = _encoder()
    measured = {1: 1 / 2.60, 2: 1 / 2.65, 4: 1 / 3.37, 8: 1 / 2.99}
    peaks = {1: 1005 * 1024, 2: 1011 * 1024, 4: 1177 * 1024, 8: 1402 * 1024}
    monkeypatch.setattr(tuning, "peak_rss", lambda: 1000 * 1024)
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, measured, rss_kib=peaks.__getitem__,
                 monkeypatch=monkeypatch)
    assert tried == [1, 2, 4] and encoder.batch_size == 4
    # the same timings, activations a tenth of that: 8 is tried
    encoder = _encoder()
    small = {1: 1000 * 1024 + 500, 2: 1000 * 1024 + 1100, 4: 1000 * 1024 + 17_700, 8: 1000 * 1024 + 40_200}
    tried = _run(tuning.CpuTuner(encoder, fixed_batch=False), encoder, measured, rss_kib=small.__getitem__,
                 monkeypatch=monkeypatch)
    assert tried == [1, 2, 4, 8] and encoder.batch_size == 4


def test_the_page_queue_is_sized_for_the_batches_that_will_run(monkeypatch):
    assert tuning.CpuTuner(_encoder(), fixed_batch=True).largest_batch == 4
    assert tuning.CpuTuner(_encoder(), fixed_batch=False).largest_batch == max(tuning.CANDIDATES)


def test_a_kept_encoder_keeps_its_tuner_and_a_later_build_runs_no_trials(monkeypatch):
    """watch keeps the encoder (KeptEncoder): the next build's tuner is the one the first left on it, decided."""
    encoder = _encoder()
    first = tuning.tuner_for(encoder, fixed_batch=False)
    _run(first, encoder, {size: (0.1 if size == 2 else 0.2) for size in tuning.CANDIDATES})
    assert first.summary()["trial_batches"] > 0 and encoder.batch_size == 2
    second = tuning.tuner_for(encoder, fixed_batch=False)
    assert second is first and second.decided and encoder.batch_size == 2
    for _ in range(5):
        second.batch_done(2, 0.2)
    summary = second.summary()
    assert summary["trial_batches"] == 0 and summary["batch_size"] == 2 and summary["pages_per_second_by_batch"]
    assert tuning.tuner_for(_encoder(), fixed_batch=False) is not first  # another encoder (model, device, dtype): its own trials
    assert tuning.tuner_for(encoder, fixed_batch=True) is not first


def test_trials_a_build_left_unfinished_go_on_in_the_next_and_the_pause_between_is_no_wait(four_cores):
    threads = four_cores
    encoder = _encoder()
    clock = Clock()
    tuner = tuning.tuner_for(encoder, fixed_batch=False)
    tuner._clock = clock
    for _ in range(3):  # a first build of 3 pages: 1's trial is not over
        tuner.waiting()
        clock.now += 0.1
        tuner.batch_done(1, 0.1)
    assert not tuner.decided and encoder.batch_size == 1
    tuner.waiting()
    clock.now += 600  # ten minutes until the next save
    again = tuning.tuner_for(encoder, fixed_batch=False)
    assert again is tuner and again.summary()["trial_batches"] == 0
    clock.now += 0.1  # the next build's first batch, as the engine feeds it: no waiting() before it
    again.batch_done(1, 0.1)
    _run(again, encoder, {size: 0.1 for size in tuning.CANDIDATES}, clock=clock)
    assert again.decided and 1 in again.summary()["pages_per_second_by_batch"]
    assert threads == [] and again.summary()["waited_share"] < tuning.WAIT_SHARE  # the pause was not a wait for pages


@pytest.mark.slow
def test_a_cpu_build_measures_and_reports_its_choice(tiny_model, tmp_path):
    import json

    from conftest import run_cli
    from docgen import make_pdf


    docs = tmp_path / "docs"
    for i in range(6):  # the trials of all four batch sizes take 47 pages
        make_pdf(docs / f"report-{i}.pdf", [f"report {i} page {p}" for p in range(10)])
    tuned = run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(tmp_path / "a"), "--json")
    assert tuned.exit_code == 0, tuned.stderr
    choice = json.loads(tuned.stdout)["cpu_tuning"]
    assert choice["decided"] and choice["batch_size"] in tuning.CANDIDATES
    assert set(choice["pages_per_second_by_batch"]) <= {str(size) for size in tuning.CANDIDATES}
    fixed = run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(tmp_path / "b"), "--json",
                    "--batch-size", "3")
    assert json.loads(fixed.stdout)["cpu_tuning"]["batch_size"] == 3


@pytest.mark.slow
def test_the_page_queue_shrinks_to_two_batches_of_the_size_kept(tiny_model, tmp_path, monkeypatch):
    """While the trials run the queue holds two batches of 8; once 2 is kept (as a model-bound model
    keeps it), two batches of 2: a processed ColQwen2.5 page is 7 MB in float32."""
    from conftest import run_cli
    from docgen import make_pdf

    from localgpt_index.ingest.feed import PageFeed

    decide = tuning.CpuTuner._decide

    def keep_two(tuner) -> None:
        decide(tuner)
        tuner.encoder.batch_size = 2

    monkeypatch.setattr(tuning.CpuTuner, "_decide", keep_two)
    sizes: list[int] = []
    resize = PageFeed.set_queue_pages
    monkeypatch.setattr(PageFeed, "set_queue_pages", lambda feed, pages: (sizes.append(pages), resize(feed, pages)))
    docs = tmp_path / "docs"
    for i in range(6):
        make_pdf(docs / f"report-{i}.pdf", [f"report {i} page {p}" for p in range(10)])
    result = run_cli("build", str(docs), "--model", str(tiny_model), "--index-dir", str(tmp_path / "idx"), "--json")
    assert result.exit_code == 0, result.stderr
    assert sizes[0] == 2 * max(tuning.CANDIDATES) and sizes[-1] == 4


@pytest.mark.slow
@pytest.mark.parametrize("one, team, kept", [(2.0, 1.0, 2), (1.2, 1.0, 1), (1.0, 2.0, 1)])
def test_the_query_encoder_keeps_a_team_of_threads_only_where_it_pays_on_its_own_thread(tiny_model, one, team, kept):
    """serve's warm-up times a query's forward pass with torch's thread count and with one thread, on the
    thread that encodes queries, and keeps the team only where it takes at most TEAM_TIME of one thread's
    time (a little faster is not worth twice the CPU); the thread that started it keeps its own count."""
    import threading

    import torch

    from localgpt_index.models.resolve import ModelSpec, resolve_model
    from localgpt_index.query.search import load_query_encoder

    encoder = load_query_encoder(resolve_model(str(tiny_model)), ModelSpec(device="cpu"))
    now = [0.0]

    def clock() -> float:  # seconds a pass takes with one thread, and with two
        now[0] += one if torch.get_num_threads() == 1 else team
        return now[0]

    before, seen = torch.get_num_threads(), {}

    def encoder_thread() -> None:
        torch.set_num_threads(2)  # what torch's count is where there are two cores or more
        seen["chosen"] = tuning.query_threads(encoder, ["what was the revenue growth"], clock=clock)
        seen["kept"] = torch.get_num_threads()

    thread = threading.Thread(target=encoder_thread)
    thread.start()
    thread.join()
    assert seen == {"chosen": kept, "kept": kept}
    assert torch.get_num_threads() == before
