# Writes the selection tables benches/issue_table.rs times (deterministic: Python's Mersenne Twister
# from the seed). Usage: python3 gen_selections.py OUT LENS OFFSETS REQUESTS LAYERS DPRIME RHO K M SEED
#   selections_v4_flash_60x21.csv: 8192,16384,32768 0,1,2 60 21 1.2 0.6 512 8 1
#   selections_v4_flash_40x2.csv: 16384,65536 0,1 40 2 1.2 0.6 512 8 2
# Synthetic selection tables (request x layer) drawn from the scalar model: shared z per request,
# per-layer best of e covering-entry scores, distractors above ~ Bin(n - e, Q(best)), selected when < k.
import math, random, sys
def Q(x): return 0.5*math.erfc(x/math.sqrt(2))
def binom(rng, n, p):
    if p <= 0: return 0
    if p >= 1: return n
    mode = int((n+1)*p); mode = min(mode, n)
    lp = lambda i: math.lgamma(n+1)-math.lgamma(i+1)-math.lgamma(n-i+1)+i*math.log(p)+(n-i)*math.log1p(-p)
    u = rng.random()
    # walk outward from the mode accumulating probability
    pm = math.exp(lp(mode)); acc = pm
    if u < acc: return mode
    lo, hi = mode-1, mode+1; plo = phi = pm
    r = p/(1-p)
    while lo >= 0 or hi <= n:
        if hi <= n:
            phi *= (n-hi+1)/hi*r; acc += phi
            if u < acc: return hi
            hi += 1
        if lo >= 0:
            plo *= (lo+1)/(n-lo)/r; acc += plo
            if u < acc: return lo
            lo -= 1
        if phi < 1e-300 and plo < 1e-300: break
    return mode
def main(out, lens, offsets, requests, layers, d, rho, k, m, seed):
    rng = random.Random(seed)
    cells = [(L, L//2 + o) for L in lens for o in offsets]
    lines = ["# provenance: CONSTRUCTED by benches/data/gen_selections.py (seed %d): %d requests x %d layers drawn from the scalar model at dprime %g, layer_corr %g, %d-token needles, k %d, c 4 with overlap; for timing the selection fit (benches/issue_table.rs)" % (seed, requests, layers, d, rho, m, k),
             "request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap"]
    for q in range(requests):
        L, s = cells[q % len(cells)]
        n = L // 4
        first, last = s // 4, (s + m - 1) // 4 + 1
        e = last - first + 1
        z = rng.gauss(0, 1)
        depth = s / (L - m)
        for layer in range(layers):
            best = max(d + math.sqrt(rho)*z + math.sqrt(1-rho)*rng.gauss(0, 1) for _ in range(e))
            above = binom(rng, n - e, Q(best))
            lines.append("req %d,%d,%.17g,%d,%d,%d,%d,%d,4,true" % (q+1, L, depth, layer, k, int(above < k), s, m))
    open(out, "w").write("\n".join(lines) + "\n")
if __name__ == "__main__":
    a = sys.argv
    main(a[1], [int(x) for x in a[2].split(",")], [int(x) for x in a[3].split(",")], int(a[4]), int(a[5]), float(a[6]), float(a[7]), int(a[8]), int(a[9]), int(a[10]))
