"""What vLLM's prefix-cache block hashing costs a request on the host, by prompt length, block size and hash
(issue 35: one vLLM engine on CLINC150's 958-token prompts was host-bound at ~1 ms a request with the GPU
3-5 % busy; KV blocks of 64 scored 13 % faster, xxhash 9 % slower: bench/HISTORY.md session 28).

Pure Python, no GPU: vLLM's own ``Request`` built with and without its block hasher
(``kv_cache_utils.get_request_block_hasher``), as the engine core builds one per request, on a prompt of a
shared prefix plus 20 item tokens under a LoRA adapter. It needs vLLM's source and its pure-Python
dependencies on the path (the GPU bundle's ``vllm/`` unpacked, the rest installed with ``pip --target``)::

    PYTHONHASHSEED=0 PYTHONPATH=VLLM_SRC:EXTRA python bench/vllm_request_cost.py [--n 2000] [--repeats 3] > OUT.md
"""

from __future__ import annotations

import argparse
import random
import statistics
import subprocess
import time
from pathlib import Path


def per_request_us(make, n: int) -> float:  # type: ignore[no-untyped-def]
    began = time.perf_counter()
    for i in range(n):
        make(i)
    return (time.perf_counter() - began) / n * 1e6


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=2000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--prompts", default="60,980", help="prompt lengths in tokens (TREC's ~60, CLINC150's ~980)")
    args = ap.parse_args()
    import vllm
    from vllm.lora.request import LoRARequest
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core import kv_cache_utils
    from vllm.v1.request import Request

    here = Path(__file__).resolve().parent
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=here).stdout.strip()
    print(f"vLLM {vllm.__version__}, commit {commit}, n {args.n}, repeats {args.repeats} (median)\n")
    print("| hash | prompt tokens | block size | blocks | Request with block hashes µs | without µs | hashing µs |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    rng = random.Random(0)
    params = SamplingParams(max_tokens=1, logprob_token_ids=list(range(128)))
    lora = LoRARequest("a1", 1, "/adapter")
    for algo in ("sha256", "xxhash"):
        fn = get_hash_fn_by_name(algo)
        kv_cache_utils.init_none_hash(fn)
        for tokens in (int(t) for t in args.prompts.split(",")):
            prefix = [rng.randrange(49152) for _ in range(tokens - 20)]
            for block in (16, 64, 128):
                hasher = kv_cache_utils.get_request_block_hasher(block, fn)

                def make(i: int, hasher=hasher, prefix=prefix):  # type: ignore[no-untyped-def]
                    ids = prefix + [rng.randrange(49152) for _ in range(20)]
                    return Request(str(i), ids, params, None, lora_request=lora, block_hasher=hasher)

                with_h = statistics.median(per_request_us(make, args.n) for _ in range(args.repeats))
                without = statistics.median(
                    per_request_us(lambda i: make(i, hasher=None), args.n) for _ in range(args.repeats)
                )
                blocks = len(make(0).block_hashes)
                row = (algo, tokens, block, blocks, f"{with_h:.1f}", f"{without:.1f}", f"{with_h - without:.1f}")
                print("| " + " | ".join(map(str, row)) + " |")


if __name__ == "__main__":
    main()
