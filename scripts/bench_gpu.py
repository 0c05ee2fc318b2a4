#!/usr/bin/env python3
"""GPU throughput of the encoder: a full-size ColPali with random weights, in bfloat16.

The checkpoint is built here from vidore/colpali-v1.3's architecture (PaliGemma-3B
at 448 px: SigLIP So400m/14 and Gemma-2B; same layers and widths, so the same
FLOPs per page) and loaded through byaldi, as a real one would be. Nothing is
downloaded. It prints pages/s of the lgpt-index encoder at several batch sizes
and of byaldi's own one-page path (RAGMultiModalModel's _add_to_index, inside
autocast), and the share of the GPU's bf16 peak reached: against the datasheet
(989 TFLOP/s dense for H100/H200 SXM) and against a matrix product measured in
the same run.

    python scripts/bench_gpu.py                               # on a CUDA machine
    python scripts/bench_gpu.py --spec bench --device cpu --dtype float32 --batch-sizes 2 4 --pages 8   # smoke test

With --family colqwen2_5 it measures ColQwen2.5 instead: Qwen2.5-VL-3B's layers (the base of
vidore/colqwen2.5-v0.2) at its 768 image tokens a page, loaded through colpali-engine, against
colpali-engine's own loop as its README shows it (process_images of one page, then the model).

    python scripts/bench_gpu.py --family colqwen2_5           # on a CUDA machine
    python scripts/bench_gpu.py --family colqwen2_5 --spec bench --device cpu --batch-sizes 2 --pages 4 --byaldi-pages 2

Pages are preprocessed before timing (in a build that runs in the render thread);
the timed part is the batch assembly, the forward pass and copying vectors back.

With --query it measures the exact device scorer (index/scoring/device.py) instead: --pages synthetic
pages of --tokens random unit float16 vectors each, held in memory (a NumPy array shaped like a
segment's memory map; the store is not involved: opening and block checks are bench_bigindex.py's),
one query and --stack stacked, resident on the device and streamed to it, against the bandwidth bound
(the vectors' bytes over the device's copy rate measured in the same run), and checked against the
CPU scorer (top-10 identical, every score within 1e-3). The target on one H200: one query over
100,000 pages under 50 ms.

    python scripts/bench_gpu.py --query --pages 100000 --tokens 1030     # on a CUDA machine (26 GB of vectors)
    python scripts/bench_gpu.py --query --device cpu --pages 500          # smoke test
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

DATASHEET_BF16_TFLOPS = 989.0


def flops_per_page(config, image_tokens: int, text_tokens: int) -> float:
    """Multiply-adds x 2 of one page's forward pass (the LM head is skipped by the encoder)."""
    v, t = config.vision_config, config.text_config
    dv, iv, tv = v.hidden_size, v.intermediate_size, image_tokens
    vision = v.num_hidden_layers * (2 * tv * (4 * dv * dv + 2 * dv * iv) + 4 * tv * tv * dv)
    vision += 2 * tv * (3 * v.patch_size**2) * dv  # patch embedding
    projector = 2 * tv * dv * t.hidden_size
    dt, it, n = t.hidden_size, t.intermediate_size, text_tokens
    q = t.num_attention_heads * t.head_dim
    kv = t.num_key_value_heads * t.head_dim
    text = t.num_hidden_layers * (2 * n * (dt * q + 2 * dt * kv + q * dt + 3 * dt * it) + 4 * n * n * q)
    return vision + projector + text + 2 * n * dt * 128


def qwen_flops_per_page(config, patches: int, text_tokens: int) -> float:
    """Multiply-adds x 2 of one Qwen2.5-VL page: the vision tower's windowed and full-attention
    layers over `patches` patches, the 2 x 2 merger, then the language model over `text_tokens`."""
    v, t = config.vision_config, config.text_config
    d, i, n = v.hidden_size, v.intermediate_size, patches
    window = (v.window_size // v.patch_size) ** 2
    full = len(v.fullatt_block_indexes)
    vision = v.depth * 2 * n * (4 * d * d + 3 * d * i) + 4 * n * d * (full * n + (v.depth - full) * window)
    vision += 2 * n * (3 * v.temporal_patch_size * v.patch_size**2) * d  # patch embedding
    merged = 4 * d
    vision += 2 * (n // 4) * (merged * merged + merged * v.out_hidden_size)
    dt, it = t.hidden_size, t.intermediate_size
    q = t.num_attention_heads * (dt // t.num_attention_heads)
    kv = t.num_key_value_heads * (dt // t.num_attention_heads)
    m = text_tokens
    text = t.num_hidden_layers * (2 * m * (dt * q + 2 * dt * kv + q * dt + 3 * dt * it) + 4 * m * m * q)
    return vision + text + 2 * m * dt * 128


def measured_peak_tflops(device: str) -> float | None:
    import torch

    if not device.startswith("cuda"):
        return None
    a = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    b = torch.randn(8192, 8192, device=device, dtype=torch.bfloat16)
    for _ in range(3):
        a @ b
    torch.cuda.synchronize()
    started = time.perf_counter()
    for _ in range(10):
        a @ b
    torch.cuda.synchronize()
    return 10 * 2 * 8192**3 / (time.perf_counter() - started) / 1e12


def sync(device: str) -> None:
    import torch

    if device.startswith("cuda"):
        torch.cuda.synchronize()


def pages_per_second(encoder, batch: list, at_least: int, device: str) -> float:
    """Encode `batch` again and again until `at_least` pages are done; pages per second."""
    sync(device)
    started = time.perf_counter()
    done = 0
    while done < at_least:
        encoder.encode_pages(batch)
        done += len(batch)
    sync(device)
    return done / (time.perf_counter() - started)


def timed_batches(encoder, prepared: list, batch: int, at_least: int, flops: float, peak: float | None) -> tuple[float, float]:
    """The encoder's pages/s at batches of `batch` prepared pages, and its peak GPU memory (GiB), printed."""
    import torch

    device = encoder.precision.device
    encoder.batch_size = batch
    pages = [prepared[i % len(prepared)] for i in range(batch)]
    encoder.encode_pages(pages)  # warm-up
    if device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    rate = pages_per_second(encoder, pages, at_least, device)
    memory = torch.cuda.max_memory_allocated() / 2**30 if device.startswith("cuda") else float("nan")
    achieved = rate * flops / 1e12
    print(f"lgpt-index encoder, batch {batch:3d}: {rate:8.1f} pages/s, {achieved:6.0f} TFLOP/s = "
          f"{achieved / DATASHEET_BF16_TFLOPS:6.1%} of datasheet bf16 peak"
          + (f", {achieved / peak:6.1%} of measured" if peak else "")
          + f"; peak GPU memory {memory:.1f} GiB", flush=True)
    return rate, memory


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spec", default="full")
    parser.add_argument("--device", default="cuda")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--batch-sizes", type=int, nargs="+", default=[8, 16, 32, 64])
    parser.add_argument("--pages", type=int, default=None, help="pages timed per batch size [192]; --query: pages in the index [100000]")
    parser.add_argument("--byaldi-pages", type=int, default=24)
    parser.add_argument("--compile", action="store_true", help="also time the encoder with torch.compile")
    parser.add_argument("--profile", action="store_true", help="print the GPU kernels that take the time, at the first batch size")
    parser.add_argument("--family", choices=["colqwen2_5"], default=None,
                        help="ColQwen2.5 (Qwen2.5-VL-3B's layers; --spec bench: narrow) against colpali-engine's loop")
    parser.add_argument("--query", action="store_true", help="measure the exact device scorer (then --pages: pages in the index)")
    parser.add_argument("--tokens", type=int, default=1030, help="--query: vectors a page")
    parser.add_argument("--query-tokens", type=int, default=20, help="--query: vectors a query")
    parser.add_argument("--stack", type=int, default=8, help="--query: queries stacked in one pass")
    parser.add_argument("--rounds", type=int, default=5, help="--query: timed rounds of each measurement (the median is kept)")
    parser.add_argument("--bf16-queries", action="store_true",
                        help="--query: query vectors rounded through bfloat16, as a bfloat16 model makes them")
    parser.add_argument("--no-stream", action="store_true", help="--query: skip the streamed measurement")
    parser.add_argument("--json", default=None, metavar="PATH", help="--query: write the numbers here as JSON")
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    if args.query:
        from bench_gpu_query import query_main

        query_main(args)
        return
    args.pages = args.pages or 192
    if args.family:
        family_main(args)
        return

    import numpy as np
    import torch
    from byaldi import RAGMultiModalModel
    from PIL import Image

    from localgpt_index.testing.checkpoints import make_checkpoint
    from localgpt_index.models.device import choose_precision, detect_capabilities
    from localgpt_index.models.loading import open_encoder
    from localgpt_index.models.resolve import resolve_model

    caps = detect_capabilities()
    precision = choose_precision(caps, args.device, args.dtype)
    gpu = caps.cuda[0].name if caps.cuda else "no GPU"
    print(f"device {precision.device} ({gpu}), {precision.dtype}, autocast {'on' if precision.autocast else 'off'}; "
          f"torch {torch.__version__}", flush=True)
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-gpu-") as tmp:
        started = time.perf_counter()
        init_device = "cuda" if precision.device_type == "cuda" else "cpu"
        path = make_checkpoint(Path(tmp) / f"{args.spec}-colpali", args.spec, dtype=args.dtype, device=init_device)
        if init_device == "cuda":
            torch.cuda.empty_cache()
        print(f"checkpoint {args.spec} written in {time.perf_counter() - started:.1f} s", flush=True)
        started = time.perf_counter()
        rag = RAGMultiModalModel.from_pretrained(str(path), device="cuda" if init_device == "cuda" else "cpu", verbose=0)
        encoder = open_encoder(resolve_model(str(path)), precision, args.batch_sizes[0], rag=rag)
        params = sum(p.numel() for p in encoder.net.parameters())
        print(f"loaded through byaldi in {time.perf_counter() - started:.1f} s: {params / 1e9:.2f} B parameters", flush=True)

        rng = np.random.default_rng(0)
        size = encoder.render_size
        images = [Image.fromarray(rng.integers(0, 255, (size[1], size[0], 3), dtype=np.uint8)) for _ in range(8)]
        prepared = [encoder.prepare_page(images[i % 8]) for i in range(max(args.batch_sizes))]
        text_tokens = encoder.process_pages(prepared[:1])["input_ids"].shape[1]
        flops = flops_per_page(encoder.net.config, (size[0] // 14) ** 2, text_tokens)
        peak = measured_peak_tflops(precision.device)
        print(f"{flops / 1e12:.2f} TFLOP per page ({text_tokens} tokens); matrix-product peak measured here: "
              + (f"{peak:.0f} TFLOP/s" if peak else "n/a"), flush=True)

        rows = [(batch, *timed_batches(encoder, prepared, batch, args.pages, flops, peak)) for batch in args.batch_sizes]

        if args.profile:
            from torch.profiler import ProfilerActivity, profile

            encoder.batch_size = args.batch_sizes[0]
            pages = [prepared[i % len(prepared)] for i in range(encoder.batch_size)]
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                encoder.encode_pages(pages)
                sync(precision.device)
            print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=25, max_name_column_width=60))
            # the same batches with autocast off (the weights are bfloat16 already)
            from dataclasses import replace

            kept = encoder.precision
            encoder.precision = replace(kept, autocast=False)
            encoder.encode_pages(pages)
            sync(precision.device)
            started = time.perf_counter()
            for _ in range(4):
                encoder.encode_pages(pages)
            sync(precision.device)
            print(f"autocast off, batch {encoder.batch_size}: {4 * len(pages) / (time.perf_counter() - started):.1f} pages/s")
            encoder.precision = kept

        rag.model.index_name = "bench"
        autocast = torch.autocast(precision.device_type, dtype=precision.torch_dtype(), enabled=precision.autocast)
        with autocast:
            rag.model._add_to_index(images[0], False, doc_id=0, page_id=1)  # warm-up
            sync(precision.device)
            started = time.perf_counter()
            for page in range(args.byaldi_pages):
                rag.model._add_to_index(images[page % 8], False, doc_id=1, page_id=page + 1)
            sync(precision.device)
        byaldi_rate = args.byaldi_pages / (time.perf_counter() - started)
        print(f"byaldi one page per forward (_add_to_index, autocast): {byaldi_rate:8.1f} pages/s", flush=True)
        if args.compile:
            # after byaldi's own measurement: compiling changes the modules it shares
            reference = encoder.encode_pages(prepared[:2])
            compiled = open_encoder(resolve_model(str(path)), precision, args.batch_sizes[0], rag=rag, compile=True)
            for batch in args.batch_sizes:
                compiled.batch_size = batch
                pages = [prepared[i % len(prepared)] for i in range(batch)]
                started = time.perf_counter()
                compiled.encode_pages(pages)  # compiles for this batch size
                sync(precision.device)
                compile_s = time.perf_counter() - started
                rate = pages_per_second(compiled, pages, args.pages, precision.device)
                achieved = rate * flops / 1e12
                print(f"lgpt-index encoder, torch.compile, batch {batch:3d}: {rate:8.1f} pages/s, {achieved:6.0f} TFLOP/s = "
                      f"{achieved / DATASHEET_BF16_TFLOPS:6.1%} of datasheet bf16 peak (first batch, compiling: {compile_s:.0f} s)",
                      flush=True)
                rows.append((batch, rate, float("nan")))
            compiled.batch_size = 2
            difference = max(float(np.abs(a.astype(np.float32) - b.astype(np.float32)).max())
                             for a, b in zip(reference, compiled.encode_pages(prepared[:2])))
            print(f"compiled vs eager vectors: max abs difference {difference:.4f} (unit vectors, float16)")

        best = max(rows, key=lambda r: r[1])
        print(f"best: batch {best[0]}, {best[1]:.1f} pages/s = {best[1] / byaldi_rate:.1f}x byaldi; "
              f"target 80 pages/s on one H200: {'met' if best[1] >= 80 else 'NOT met'}")


def family_main(args) -> None:
    """ColQwen2.5: the lgpt-index encoder at each batch size against colpali-engine's plain loop."""
    import numpy as np
    import torch
    from PIL import Image

    import colpali_engine.models as engine
    from localgpt_index.models.device import choose_precision, detect_capabilities
    from localgpt_index.models.loading import open_encoder
    from localgpt_index.testing.checkpoints import make_family_checkpoint
    from localgpt_index.models.resolve import resolve_model

    caps = detect_capabilities()
    precision = choose_precision(caps, args.device, args.dtype)
    gpu = caps.cuda[0].name if caps.cuda else "no GPU"
    print(f"{args.family} on {precision.device} ({gpu}), {precision.dtype}, autocast {'on' if precision.autocast else 'off'}; "
          f"torch {torch.__version__}", flush=True)
    geometry = "full" if args.spec == "full" else "bench"
    with tempfile.TemporaryDirectory(prefix="lgpt-bench-gpu-") as tmp:
        started = time.perf_counter()
        init_device = "cuda" if precision.device_type == "cuda" else "cpu"
        path = make_family_checkpoint(Path(tmp) / f"{geometry}-{args.family}", args.family, geometry=geometry,
                                      dtype=precision.dtype, device=init_device)
        if init_device == "cuda":
            torch.cuda.empty_cache()
        print(f"checkpoint {geometry} written in {time.perf_counter() - started:.1f} s", flush=True)
        started = time.perf_counter()
        encoder = open_encoder(resolve_model(str(path)), precision, args.batch_sizes[0])
        params = sum(p.numel() for p in encoder.net.parameters())
        print(f"loaded through colpali-engine in {time.perf_counter() - started:.1f} s: {params / 1e9:.2f} B parameters", flush=True)

        rng = np.random.default_rng(0)
        width, height = encoder.render_size.fit(1700, 2200)  # a letter page at 200 dpi, as the build renders it
        images = [Image.fromarray(rng.integers(0, 255, (height, width, 3), dtype=np.uint8)) for _ in range(8)]
        prepared = [encoder.prepare_page(images[i % 8]) for i in range(max(args.batch_sizes))]
        patches, text_tokens = prepared[0]["pixel_values"].shape[1], prepared[0]["input_ids"].shape[1]
        flops = qwen_flops_per_page(encoder.net.config, patches, text_tokens)
        peak = measured_peak_tflops(precision.device)
        print(f"pages of {width} x {height} px: {patches} patches, {text_tokens} tokens, {flops / 1e9:,.0f} GFLOP per page; "
              "matrix-product peak measured here: " + (f"{peak:.0f} TFLOP/s" if peak else "n/a"), flush=True)

        rows = [(batch, *timed_batches(encoder, prepared, batch, args.pages, flops, peak)) for batch in args.batch_sizes]
        reference = encoder.encode_pages(prepared[:1])[0]
        del encoder
        if precision.device_type == "cuda":
            torch.cuda.empty_cache()

        # colpali-engine's README: the model in bfloat16 on the device, process_images, then the model, one page at a time
        model = engine.ColQwen2_5.from_pretrained(str(path), dtype=precision.torch_dtype(), device_map=precision.device).eval()
        processor = engine.ColQwen2_5_Processor.from_pretrained(str(path))
        processing = 0.0
        with torch.no_grad():
            theirs = model(**processor.process_images([images[0]]).to(model.device))  # warm-up
            sync(precision.device)
            started = time.perf_counter()
            for page in range(args.byaldi_pages):
                before = time.perf_counter()
                batch_images = processor.process_images([images[page % 8]]).to(model.device)
                processing += time.perf_counter() - before
                model(**batch_images)
            sync(precision.device)
        loop_rate = args.byaldi_pages / (time.perf_counter() - started)
        print(f"colpali-engine loop, one page per forward: {loop_rate:8.1f} pages/s "
              f"(process_images {1000 * processing / args.byaldi_pages:.0f} ms a page of it)", flush=True)
        difference = float(np.abs(reference.astype(np.float32) - theirs[0][theirs[0].norm(dim=-1) > 0].float().cpu().numpy()).max())
        print(f"lgpt-index vs colpali-engine vectors of one page: max abs difference {difference:.4f} (unit vectors)")
        best = max(rows, key=lambda r: r[1])
        print(f"best: batch {best[0]}, {best[1]:.1f} pages/s = {best[1] / loop_rate:.1f}x colpali-engine's loop")


if __name__ == "__main__":
    main()
