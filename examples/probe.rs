use dsa_sim::engine::{montecarlo::{simulate, McPath}, analytic::Analytic};
use dsa_sim::Scenario;
fn main() {
    let cases = vec![
        Scenario::default(),
        Scenario { hard_negatives: 100.0, hard_mean: 3.0, context_len: 20000, ..Scenario::default() },
        Scenario { layers: 4, layer_corr: 0.5, readout: "at_least:2".parse().unwrap(), ..Scenario::default() },
        Scenario { compress_ratio: 8, pooling: "mean".parse().unwrap(), needle_tokens: 5, dprime: 5.0, ..Scenario::default() },
        Scenario { compress_ratio: 8, pooling: "max".parse().unwrap(), distractor: "gumbel".parse().unwrap(), index_topk: 256, ..Scenario::default() },
        Scenario { distractor: "student_t:4".parse().unwrap(), repeat: 3, ..Scenario::default() },
    ];
    for s in cases {
        let a = Analytic::new(&s).unwrap().recall();
        let t = std::time::Instant::now();
        let m = simulate(&s, 200_000, 1, McPath::Exact).unwrap();
        let te = t.elapsed();
        let t = std::time::Instant::now();
        let mm = simulate(&Scenario{context_len: s.context_len.min(20000), ..s.clone()}, 2000, 1, McPath::Materialise).unwrap();
        let am = Analytic::new(&Scenario{context_len: s.context_len.min(20000), ..s.clone()}).unwrap().recall();
        println!("analytic {a:.5} exact-mc {:.5} ({:?})   small: analytic {am:.4} materialised {:.4} ({:?})", m.successes as f64/m.trials as f64, te, mm.successes as f64/ mm.trials as f64, t.elapsed());
    }
}
