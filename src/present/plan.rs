//! The plan's presenter: the text and JSON of `dsa-sim plan` (and of the cells an undecided
//! verdict shows), from the typed [`Plan`].

use crate::diagnosis::plan::{Plan, Restart, MIN_GAIN_BITS, RESTART_WORTH};

/// One line: what a restart would buy, and whether the plan takes it.
pub fn restart_text(r: &Restart) -> String {
    let ks = r.other_k.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
    if r.chosen {
        format!(
            "a restart at k = {ks} buys {:.3} bits against {:.3} at the deployment's k = {} alone: planned (cells at another k need the server restarted at that k)",
            r.restart_bits, r.local_bits, r.deployment_k
        )
    } else {
        format!(
            "planned at the deployment's k = {} alone ({:.3} bits): a restart at k = {ks} would buy {:.3} bits, not worth a restart (needs {RESTART_WORTH}× as much)",
            r.deployment_k, r.local_bits, r.restart_bits
        )
    }
}

/// The JSON of `dsa-sim plan --json`.
pub fn plan_json(p: &Plan) -> serde_json::Value {
    serde_json::json!({
        "cells": p.cells.iter().map(|c| serde_json::json!({
            "context_len": c.context_len, "index_topk": c.index_topk, "depth": c.depth,
            "repeat": c.repeat, "trials": c.trials,
            "predicted": c.predicted.iter().map(|(n, p)| (n.to_string(), serde_json::json!(p))).collect::<serde_json::Map<_, _>>(),
            "information_bits": c.information_bits,
        })).collect::<Vec<_>>(),
        "budget": p.budget,
        "total_trials": p.total(),
        "candidate_k": p.candidate_k,
        "leading_hypotheses": p.leading.iter().map(|(n, w, p)| serde_json::json!({"name": n, "weight": w, "prior": p})).collect::<Vec<_>>(),
        "information": {
            "criterion": "mutual_information",
            "prior_entropy_bits": p.prior_entropy_bits,
            "posterior_entropy_bits": p.posterior_entropy_bits,
            "information_bits": p.information_bits(),
            "samples": p.information_samples,
        },
        "right_call": {
            "seed": p.seed,
            "tables": p.tables,
            "threshold": p.threshold,
            "overall": p.p_right_overall,
            "hypotheses": p.right_calls.iter().map(|r| serde_json::json!({
                "name": r.hypothesis, "prior": r.prior, "right_call": r.right_call.to_string(),
                "right_class": r.right_class, "p_right": r.p_right,
            })).collect::<Vec<_>>(),
        },
        "seed": p.seed,
        "restart": p.restart.as_ref().map(|r| serde_json::json!({
            "deployment_k": r.deployment_k, "other_k": r.other_k, "local_bits": r.local_bits,
            "restart_bits": r.restart_bits, "chosen": r.chosen, "text": restart_text(r),
        })),
    })
}
/// A text table.
pub fn plan_text(p: &Plan) -> String {
    let mut s = String::new();
    let names: Vec<&str> = p.leading.iter().map(|(n, _, _)| n.name()).collect();
    s.push_str(&format!(
        "leading hypotheses (prior = Akaike weights over them): {}\n",
        p.leading.iter().map(|(n, _, p)| format!("{n} {p:.3}")).collect::<Vec<_>>().join(", ")
    ));
    s.push_str(&format!(
        "planned cells ({} of {} trials; k from the kernel's {}):\n",
        p.total(),
        p.budget,
        p.candidate_k.iter().map(u64::to_string).collect::<Vec<_>>().join(", ")
    ));
    s.push_str(&format!(
        "  {:>9} {:>6} {:>6} {:>6} {:>7} {:>6}  predicted recall: {}\n",
        "L",
        "k",
        "depth",
        "repeat",
        "trials",
        "bits",
        names.join(" / ")
    ));
    for c in &p.cells {
        let p: Vec<String> = c.predicted.iter().map(|(_, p)| format!("{p:.3}")).collect();
        s.push_str(&format!(
            "  {:>9} {:>6} {:>6} {:>6} {:>7} {:>6.3}  {}\n",
            c.context_len,
            c.index_topk,
            c.depth,
            c.repeat,
            c.trials,
            c.information_bits,
            p.join(" / ")
        ));
    }
    if let Some(r) = &p.restart {
        s.push_str(&format!("  {}\n", restart_text(r)));
    }
    if p.total() < p.budget {
        s.push_str(&format!(
            "  (the other {} trials would add less than {} bits each chunk under the fitted hypotheses: not planned)\n",
            p.budget - p.total(),
            MIN_GAIN_BITS
        ));
    }
    s.push_str(&format!(
        "expected information about the hypothesis: {:.3} of {:.3} bits (posterior entropy {:.3} bits; {} draws per hypothesis, seed {})\n",
        p.information_bits(),
        p.prior_entropy_bits,
        p.posterior_entropy_bits,
        p.information_samples,
        p.seed
    ));
    s.push_str(&format!(
        "right call after these cells (simulated, {} tables per hypothesis, seed {}; hypotheses scored at their fits, not refitted): overall {:.2}\n",
        p.tables, p.seed, p.p_right_overall
    ));
    for r in &p.right_calls {
        let call = match &r.right_class {
            Some(c) => format!("{} ({c})", r.right_call),
            None => r.right_call.to_string(),
        };
        s.push_str(&format!(
            "  if {} is true (prior {:.3}): the call is {call} in {:.2}\n",
            r.hypothesis, r.prior, r.p_right
        ));
    }
    s
}
