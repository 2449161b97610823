"""A probe-shaped recall table (what `dsa-sim probe` writes): 6 lengths from 2K to 64K, each at
4 residues mod 4 and 3 depths, 5 trials a cell, recall 1 up to 4K and about 0.25 beyond.

    python3 benches/data/gen_probe_table.py K TOKENS > table.csv

TOKENS is the needle's token count on every row, or `var` for 15-18 varying by row (a needle
tokenised at different offsets). The issue-40 bench (benches/probe_table.rs) reads the tables
this wrote: probe72_k64_t16.csv (Quest, k 64), probe72_k2048_t16.csv and probe72_k2048_var.csv
(DeepSeek-V3.2), probe72_k512_t16.csv (DeepSeek-V4-Flash).
"""
import sys

k = int(sys.argv[1])
tokens = sys.argv[2]
lens = [16, 15, 17, 16, 18, 16] if tokens == "var" else [int(tokens)]
print("context_len,index_topk,depth,repeat,needle_tokens,trials,hits")
i = 0
for length in [2000, 4000, 8000, 16000, 32000, 64000]:
    for depth in ["0.1000", "0.5000", "0.9000"]:
        for r in range(4):
            hits = 5 if length <= 4000 else [1, 2, 0, 2][(i + r) % 4]
            print(f"{length + r},{k},{depth},1,{lens[i % len(lens)]},5,{hits}")
            i += 1
