use dsa_sim::engine::analytic::{Analytic, EVALS, EXP};
use dsa_sim::Scenario;
use std::sync::atomic::Ordering;
fn main() {
    for s in [Scenario::default(), Scenario { context_len: 1<<20, index_topk: 4096, ..Scenario::default() }] {
        EVALS.store(0, Ordering::Relaxed); EXP.store(0, Ordering::Relaxed);
        let r = Analytic::new(&s).unwrap().recall();
        println!("recall {r} evals {} expected_above {}", EVALS.load(Ordering::Relaxed), EXP.load(Ordering::Relaxed));
    }
}
