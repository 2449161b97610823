//! Calibration on captured per-layer selections: the exact pattern likelihood's building block
//! (P(exactly m of L layers select)) against its limits and an independent simulation, and
//! parameter recovery end to end: selections drawn from known parameters, written as captures in
//! the three layouts (.npz, SGLang replies, vLLM replies), imported, calibrated.

use crate::common;

use base64::Engine as _;
use dsa_sim::engine::analytic::Analytic;
use dsa_sim::scenario::Pooling;
use dsa_sim::stats::norm_sf;
use dsa_sim::Scenario;
use rand::{Rng, SeedableRng};
use rand_distr::{Distribution, StandardNormal};
use statrs::distribution::{Binomial, DiscreteCDF};
use std::io::Write;
use std::process::Command;

/// Token-level scenario: N = context_len candidates, one needle entry, no window.
fn scen(context_len: u64, k: u64, dprime: f64, sd: f64, rho: f64, layers: u32) -> Scenario {
    Scenario {
        context_len,
        index_topk: k,
        max_topk: 2048,
        compress_ratio: 1,
        overlap: false,
        window: 0,
        sink: 0,
        needle_tokens: 1,
        depth: 0.5,
        pooling: Pooling::None,
        dprime,
        needle_sd: sd,
        layer_corr: rho,
        layers,
        ..Scenario::default()
    }
}

/// One layer's selection by direct simulation: the needle's entry scores x, the number of the
/// N − 1 normal distractors above it is Binomial(N − 1, Q(x)), selected when fewer than k.
fn simulate_request(rng: &mut impl Rng, n: u64, k: u64, dprime: f64, sd: f64, rho: f64, layers: usize) -> Vec<bool> {
    let z: f64 = StandardNormal.sample(rng);
    (0..layers)
        .map(|_| {
            let e: f64 = StandardNormal.sample(rng);
            let x = dprime + sd * (rho.sqrt() * z + (1.0 - rho).sqrt() * e);
            let above = rand_distr::Binomial::new(n - 1, norm_sf(x)).unwrap().sample(rng);
            above < k
        })
        .collect()
}

#[test]
fn layer_count_pmf_limits_and_simulation() {
    let (n, k, d, sd, layers) = (20_000u64, 64u64, 2.7, 1.0, 5u32);
    // ρ = 0: the layers are independent: Binomial(L, p1).
    let s0 = scen(n, k, d, sd, 0.0, layers);
    let pmf = Analytic::new(&s0).unwrap().layer_count_pmf();
    let p1 = Analytic::new(&scen(n, k, d, sd, 0.0, 1)).unwrap().rank_cdf(k);
    let bin = Binomial::new(p1, layers as u64).unwrap();
    for (m, p) in pmf.iter().enumerate() {
        let want = statrs::distribution::Discrete::pmf(&bin, m as u64);
        assert!((p - want).abs() < 1e-7, "rho 0, m {m}: {p} vs {want}");
    }
    // ρ = 1: one needle score x shared by the layers, distractors independent:
    // E_x[C(L, m) B(x)^m (1 − B(x))^(L − m)], B(x) = P[Bin(N − 1, Q(x)) ≤ k − 1], by Simpson.
    let pmf1 = Analytic::new(&scen(n, k, d, sd, 1.0, layers)).unwrap().layer_count_pmf();
    let steps = 4000;
    let (a, b) = (d - 10.0 * sd, d + 10.0 * sd);
    let h = (b - a) / steps as f64;
    let mut want = vec![0.0; layers as usize + 1];
    for i in 0..=steps {
        let x = a + i as f64 * h;
        let w = if i == 0 || i == steps {
            1.0
        } else if i % 2 == 1 {
            4.0
        } else {
            2.0
        };
        let phi = (-0.5 * ((x - d) / sd).powi(2)).exp() / (sd * (2.0 * std::f64::consts::PI).sqrt());
        let bx = Binomial::new(norm_sf(x), n - 1).unwrap().cdf(k - 1);
        let lb = Binomial::new(bx.clamp(0.0, 1.0), layers as u64).unwrap();
        for (m, o) in want.iter_mut().enumerate() {
            *o += w * h / 3.0 * phi * statrs::distribution::Discrete::pmf(&lb, m as u64);
        }
    }
    for (m, (p, q)) in pmf1.iter().zip(&want).enumerate() {
        assert!((p - q).abs() < 1e-6, "rho 1, m {m}: {p} vs {q}");
    }
    // ρ = 0.5 against direct simulation: 40,000 requests, each count within 5 sd.
    let s = scen(n, k, d, sd, 0.5, layers);
    let pmf = Analytic::new(&s).unwrap().layer_count_pmf();
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(42);
    let reqs = 40_000;
    let mut counts = vec![0u64; layers as usize + 1];
    for _ in 0..reqs {
        counts[simulate_request(&mut rng, n, k, d, sd, 0.5, layers as usize).iter().filter(|&&x| x).count()] += 1;
    }
    for (m, (&c, &p)) in counts.iter().zip(&pmf).enumerate() {
        let e = reqs as f64 * p;
        let sdv = (reqs as f64 * p * (1.0 - p)).sqrt();
        assert!((c as f64 - e).abs() <= 5.0 * sdv + 1.0, "rho 0.5, m {m}: {c} vs {e:.1} ± {sdv:.1}");
    }
}

/// One request's (layers × k) top-k indices: the needle's entry among them where selected.
fn topk_rows(rng: &mut impl Rng, selected: &[bool], needle: i32, n: i32, k: usize) -> Vec<i32> {
    let mut out = Vec::with_capacity(selected.len() * k);
    for &sel in selected {
        let mut picked: Vec<i32> = Vec::with_capacity(k);
        if sel {
            picked.push(needle);
        }
        while picked.len() < k {
            let j = rng.random_range(0..n);
            if j != needle && !picked.contains(&j) {
                picked.push(j);
            }
        }
        // Rows are not sorted by score: shuffle the needle's slot away from the front.
        let at = rng.random_range(0..k);
        picked.swap(0, at);
        out.extend(picked);
    }
    out
}

fn dsa(args: &[&str]) -> std::process::Output {
    Command::new(env!("CARGO_BIN_EXE_dsa-sim")).args(args).output().unwrap()
}

#[test]
fn parameters_are_recovered_from_captures_in_every_layout() {
    // Truth: dprime 2.7, needle_sd 1 (fixed), layer_corr 0.6; 4 layers, k = 64, token-level,
    // 500 requests at each of 20,000 and 80,000 tokens.
    let (d, sd, rho, layers, k) = (2.7, 1.0, 0.6, 4usize, 64usize);
    let cells = [20_000u64, 80_000];
    let reqs = 500;
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(7);
    let dir = tempfile::tempdir().unwrap();
    let b64 = base64::engine::general_purpose::STANDARD;
    for layout in ["npz", "sglang", "vllm"] {
        std::fs::create_dir(dir.path().join(layout)).unwrap();
    }
    let mut manifests = [String::new(), String::new(), String::new()];
    for m in manifests.iter_mut() {
        m.push_str("file,row,context_len,needle_start,needle_tokens,request\n");
    }
    let mut sglang = String::new();
    let mut q = 0usize;
    for &l in &cells {
        let needle = (l / 2) as i32;
        for _ in 0..reqs {
            let sel = simulate_request(&mut rng, l, k as u64, d, sd, rho, layers);
            let idx = topk_rows(&mut rng, &sel, needle, l as i32, k);
            let arr =
                common::npy("<i4", &[1, layers, k], &idx.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
            // .npz: one archive per request, array `topk_index`.
            let name = format!("q{q}.npz");
            let mut z = zip::ZipWriter::new(std::fs::File::create(dir.path().join("npz").join(&name)).unwrap());
            z.start_file("topk_index.npy", zip::write::SimpleFileOptions::default()).unwrap();
            z.write_all(&arr).unwrap();
            z.finish().unwrap();
            manifests[0].push_str(&format!("{name},0,{l},{needle},1,0\n"));
            // SGLang: one JSONL of replies, meta_info.indexer_topk = base64 of int32.
            let raw: Vec<u8> = idx.iter().flat_map(|x| x.to_le_bytes()).collect();
            sglang
                .push_str(&format!("{{\"text\":\"\",\"meta_info\":{{\"indexer_topk\":\"{}\"}}}}\n", b64.encode(&raw)));
            manifests[1].push_str(&format!("replies.jsonl,0,{l},{needle},1,{q}\n"));
            // vLLM: one reply per request, choices[0].indexer_topk = base64 of .npy bytes.
            let name = format!("q{q}.json");
            std::fs::write(
                dir.path().join("vllm").join(&name),
                format!("{{\"choices\":[{{\"index\":0,\"indexer_topk\":\"{}\"}}]}}", b64.encode(&arr)),
            )
            .unwrap();
            manifests[2].push_str(&format!("{name},0,{l},{needle},1,0\n"));
            q += 1;
        }
    }
    std::fs::write(dir.path().join("sglang/replies.jsonl"), sglang).unwrap();
    let mut csvs = Vec::new();
    let mut fits = Vec::new();
    for (i, layout) in ["npz", "sglang", "vllm"].iter().enumerate() {
        let m = dir.path().join(layout).join("manifest.csv");
        std::fs::write(&m, &manifests[i]).unwrap();
        let out = dir.path().join(format!("{layout}-selections.csv"));
        let o = dsa(&[
            "import",
            "topk",
            "--manifest",
            m.to_str().unwrap(),
            "--layers",
            &layers.to_string(),
            "--index-topk",
            &k.to_string(),
            "--compress-ratio",
            "1",
            "--overlap",
            "false",
            "--out",
            out.to_str().unwrap(),
        ]);
        assert!(o.status.success(), "{layout}: {}", String::from_utf8_lossy(&o.stderr));
        csvs.push(std::fs::read_to_string(&out).unwrap());
        let o = dsa(&[
            "calibrate",
            "--data",
            out.to_str().unwrap(),
            "--compress-ratio",
            "1",
            "--overlap",
            "false",
            "--window",
            "0",
            "--needle-tokens",
            "1",
            "--needle-sd",
            "1",
            "--index-topk",
            "64",
            "--fit",
            "dprime,layer_corr",
            "--json",
        ]);
        assert!(o.status.success(), "{layout}: {}", String::from_utf8_lossy(&o.stderr));
        let j: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
        fits.push(j);
    }
    assert_eq!(csvs[0], csvs[1]);
    assert_eq!(csvs[0], csvs[2]);
    for j in &fits {
        assert_eq!(j["estimates"], fits[0]["estimates"]);
    }
    let e = &fits[0]["estimates"];
    eprintln!("{e}");
    for (field, truth) in [("dprime", d), ("layer_corr", rho)] {
        let (lo, hi, v) = (
            e[field]["ci_low"].as_f64().unwrap(),
            e[field]["ci_high"].as_f64().unwrap(),
            e[field]["value"].as_f64().unwrap(),
        );
        assert!(lo <= truth && truth <= hi, "{field}: truth {truth} outside [{lo}, {hi}] (estimate {v})");
        assert!(hi - lo < 0.5, "{field}: interval [{lo}, {hi}] too wide to be a recovery");
    }
    // The fit's goodness of fit is that of the layers' patterns: cells × layers − parameters.
    assert_eq!(fits[0]["df"], 2 * 4 - 2);
    // docs/model.md quotes the recovery: it must be this build's.
    let f = |name: &str| {
        let x = &e[name];
        format!(
            "{:.2} [{:.2}, {:.2}]",
            x["value"].as_f64().unwrap(),
            x["ci_low"].as_f64().unwrap(),
            x["ci_high"].as_f64().unwrap()
        )
    };
    let doc =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/docs/model.md")).unwrap().replace("\n  ", " ");
    let quoted = format!("(truth 2.7 and 0.6: {} and {})", f("dprime"), f("layer_corr"));
    assert!(doc.contains(&quoted), "docs/model.md should quote: {quoted}");
}

#[test]
fn a_selection_table_under_the_monte_carlo_only_model_is_refused_in_one_line() {
    let dir = tempfile::tempdir().unwrap();
    let p = dir.path().join("sel.csv");
    std::fs::write(&p, "request,context_len,depth,layer,index_topk,selected\n0,4096,0.5,0,64,1\n0,4096,0.5,1,64,0\n")
        .unwrap();
    let o = dsa(&[
        "calibrate",
        "--data",
        p.to_str().unwrap(),
        "--preset",
        "deepseek-v4-flash",
        "--stack",
        "none",
        "--pooling",
        "mean",
        "--fit",
        "dprime",
    ]);
    assert_eq!(o.status.code(), Some(2), "{}", String::from_utf8_lossy(&o.stderr));
    let e = String::from_utf8_lossy(&o.stderr);
    assert!(e.contains("exact likelihood") && e.trim().lines().count() == 1, "{e}");
}

/// What `import topk` knows reaches the fit: captures drawn at dprime 1.2, layer_corr 0.6 with
/// 8-token needles on V4's geometry (c = 4, overlapping blocks), imported and calibrated with the
/// preset alone. selections.csv carries each request's needle_start, needle_tokens and the
/// geometry assumed, so the fit uses 8-token needles without `--needle-tokens 8`; a flag that
/// contradicts the table is refused.
#[test]
fn the_imports_needle_and_geometry_reach_the_fit() {
    let (d, rho, layers, k, m) = (1.2f64, 0.6f64, 4usize, 512usize, 8u64);
    let mut rng = rand_xoshiro::Xoshiro256PlusPlus::seed_from_u64(21);
    let dir = tempfile::tempdir().unwrap();
    let mut manifest = String::from("file,row,context_len,needle_start,needle_tokens\n");
    let mut idx: Vec<i32> = Vec::new();
    let mut row = 0usize;
    for &l in &[16_384u64, 65_536] {
        let n = l / 4;
        for q in 0..300u64 {
            // Starts at every residue mod 4: 3 or 4 covering entries (docs/capture.md: blocks
            // floor(s/4) .. floor((s+7)/4), plus the next entry with overlap).
            let s = l / 2 + q % 4;
            let (first, last) = (s / 4, (s + m - 1) / 4 + 1);
            let e = last - first + 1;
            let z: f64 = StandardNormal.sample(&mut rng);
            for _ in 0..layers {
                // Each covering entry draws its own needle score (pooling none); the best counts.
                let best = (0..e)
                    .map(|_| {
                        let eps: f64 = StandardNormal.sample(&mut rng);
                        d + rho.sqrt() * z + (1.0 - rho).sqrt() * eps
                    })
                    .fold(f64::NEG_INFINITY, f64::max);
                let above = rand_distr::Binomial::new(n - e, norm_sf(best)).unwrap().sample(&mut rng);
                let selected = (above as usize) < k;
                let mut picked: Vec<i32> = Vec::with_capacity(k);
                if selected {
                    picked.push(rng.random_range(first..=last) as i32);
                }
                while picked.len() < k {
                    let j = rng.random_range(0..n);
                    if (j < first || j > last) && !picked.contains(&(j as i32)) {
                        picked.push(j as i32);
                    }
                }
                let at = rng.random_range(0..k);
                picked.swap(0, at);
                idx.extend(picked);
            }
            manifest.push_str(&format!("caps.npz,{row},{l},{s},{m}\n"));
            row += 1;
        }
    }
    let arr = common::npy("<i4", &[row, layers, k], &idx.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>());
    let mut z = zip::ZipWriter::new(std::fs::File::create(dir.path().join("caps.npz")).unwrap());
    z.start_file("topk_index.npy", zip::write::SimpleFileOptions::default()).unwrap();
    z.write_all(&arr).unwrap();
    z.finish().unwrap();
    let mpath = dir.path().join("manifest.csv");
    std::fs::write(&mpath, &manifest).unwrap();
    let sel = dir.path().join("selections.csv");
    let o = dsa(&[
        "import",
        "topk",
        "--manifest",
        mpath.to_str().unwrap(),
        "--layers",
        &layers.to_string(),
        "--index-topk",
        &k.to_string(),
        "--compress-ratio",
        "4",
        "--overlap",
        "true",
        "--out",
        sel.to_str().unwrap(),
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let table = std::fs::read_to_string(&sel).unwrap();
    assert!(table.starts_with("request,context_len,depth,layer,index_topk,selected,needle_start,needle_tokens,compress_ratio,overlap\nrow 1,16384,"), "{table}");
    assert!(table.lines().nth(1).unwrap().ends_with(",8192,8,4,true"), "{table}");

    let sel_s = sel.to_str().unwrap();
    let fit = |extra: &[&str]| {
        let mut a =
            vec!["calibrate", "--preset", "deepseek-v4-flash", "--data", sel_s, "--fit", "dprime,layer_corr", "--json"];
        a.extend_from_slice(extra);
        let o = dsa(&a);
        assert!(o.status.success(), "{extra:?}: {}", String::from_utf8_lossy(&o.stderr));
        serde_json::from_slice::<serde_json::Value>(&o.stdout).unwrap()
    };
    let j = fit(&[]);
    let e = &j["estimates"];
    eprintln!("{e}");
    for (field, truth) in [("dprime", d), ("layer_corr", rho)] {
        let (lo, hi) = (e[field]["ci_low"].as_f64().unwrap(), e[field]["ci_high"].as_f64().unwrap());
        assert!(lo <= truth && truth <= hi, "{field}: truth {truth} outside [{lo}, {hi}]");
    }
    // The scenario the fit answers for is the captured needle's: 8 tokens.
    assert_eq!(j["scenario"]["needle_tokens"], 8, "{}", j["scenario"]);
    // A flag that agrees with the table changes nothing; one that contradicts it is refused.
    assert_eq!(
        fit(&["--needle-tokens", "8", "--compress-ratio", "4", "--overlap", "true"])["estimates"],
        j["estimates"]
    );
    for (flag, value, says) in [
        ("--needle-tokens", "1", "needle_tokens = 8"),
        ("--compress-ratio", "1", "compress_ratio = 4"),
        ("--overlap", "false", "overlap = true"),
    ] {
        for cmd in ["calibrate", "verdict", "plan"] {
            let mut a = vec![cmd, "--preset", "deepseek-v4-flash", "--data", sel_s, flag, value];
            if cmd == "calibrate" {
                a.extend(["--fit", "dprime"]);
            }
            let o = dsa(&a);
            assert_eq!(o.status.code(), Some(2), "{cmd} {flag} {value}");
            let err = String::from_utf8_lossy(&o.stderr);
            assert!(
                err.trim().lines().count() == 1
                    && err.contains(&format!("{flag} {value} contradicts"))
                    && err.contains(says),
                "{cmd}: {err}"
            );
        }
    }
    // The same table without the import's facts (as older versions wrote it) fits the preset's
    // one-token needle, and its interval misses the truth: the facts are what the fit needed.
    let legacy = dir.path().join("legacy.csv");
    let cut: String = table.lines().map(|l| l.splitn(7, ',').take(6).collect::<Vec<_>>().join(",") + "\n").collect();
    std::fs::write(&legacy, cut).unwrap();
    let o = dsa(&[
        "calibrate",
        "--preset",
        "deepseek-v4-flash",
        "--data",
        legacy.to_str().unwrap(),
        "--fit",
        "dprime,layer_corr",
        "--json",
    ]);
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let old: serde_json::Value = serde_json::from_slice(&o.stdout).unwrap();
    eprintln!("legacy: {}", old["estimates"]);
    assert!(old["estimates"]["dprime"]["ci_low"].as_f64().unwrap() > d, "{}", old["estimates"]);
}
