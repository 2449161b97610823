use dsa_sim::engine::montecarlo::{simulate, McPath};
use dsa_sim::engine::analytic::Analytic;
use dsa_sim::scenario::*;
fn main() {
    let s = Scenario { context_len: 65_536, index_topk: 256, repeat: 8, repeat_layout: RepeatLayout::Adjacent, compress_ratio: 4, pooling: Pooling::Mean, dprime: 3.0, ..Scenario::default() };
    let a = Analytic::new(&s).unwrap();
    println!("analytic cdf(64) = {:.12} cdf(1) {:.9}, recall {:.12}", a.rank_cdf(64), a.rank_cdf(1), a.recall());
    let g = dsa_sim::geometry::Geometry::new(&s);
    println!("{:?}", g.needle_entries);
    let run = simulate(&s, 60_000, 1000 + 19, McPath::Exact).unwrap();
    println!("mc cdf(64) {} q(0.99999) {:?} cdf1 {}", run.ranks.cdf(64), run.ranks.quantile(0.99999), run.ranks.cdf(1));
    for seed in 0..5 { let r = simulate(&s, 60_000, seed, McPath::Exact).unwrap(); println!("{} {:?}", r.ranks.cdf(64), r.ranks.quantile(1.0)); }
}
