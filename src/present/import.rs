//! The `--json` objects and summaries of `import topk` and `import niah` (and the dict of
//! Python's `import_topk`).

use crate::import::niah::Import as NiahImport;
use crate::import::topk::Import as TopkImport;
use serde_json::{json, Value};
use std::fmt::Write as _;

impl TopkImport {
    /// `--json`: requests, by_context, layers (rates with Wilson 95% intervals), per-request
    /// fractions, agreement, files, warnings.
    pub fn json(&self) -> Value {
        let agreement = match self.agreement() {
            Some((p, k)) => json!({"mean_pairwise": p, "fleiss_kappa": k}),
            None => json!({"mean_pairwise": null, "fleiss_kappa": null}),
        };
        let files: Vec<_> = self
            .files
            .iter()
            .map(|(f, i)| json!({"file": f, "layout": i.layout.name(), "captures": i.rows.len(), "rows": i.rows}))
            .collect();
        json!({
            "manifest": self.manifest,
            "requests": self.selections.len(),
            "index_topk": self.options.index_topk,
            "compress_ratio": self.options.compress_ratio,
            "overlap": self.options.overlap,
            "by_context": self.by_context(),
            "layers": self.layer_rates(),
            "per_request": self.per_request(),
            "agreement": agreement,
            "files": files,
            "warnings": self.warnings,
        })
    }

    /// The human summary.
    pub fn text(&self) -> String {
        let mut t = String::new();
        let _ = writeln!(
            t,
            "{} needle queries from {} file(s); {} layers, index_topk {}, compress_ratio {}{}",
            self.selections.len(),
            self.files.len(),
            self.options.layers,
            self.options.index_topk,
            self.options.compress_ratio,
            if self.options.overlap { " with overlap" } else { "" }
        );
        let _ = writeln!(t, "layer  selected/trials  rate    95% CI");
        for r in self.layer_rates() {
            let _ = writeln!(
                t,
                "{:>5}  {:>15}  {:.4}  [{:.4}, {:.4}]",
                r.layer,
                format!("{}/{}", r.selected, r.trials),
                r.rate,
                r.ci_low,
                r.ci_high
            );
        }
        match self.agreement() {
            Some((p, Some(k))) => {
                let _ = writeln!(t, "cross-layer agreement: mean pairwise {p:.4}, Fleiss' kappa {k:.4}");
            }
            Some((p, None)) => {
                let _ =
                    writeln!(t, "cross-layer agreement: mean pairwise {p:.4} (every call the same: kappa undefined)");
            }
            None => {}
        }
        for w in &self.warnings {
            let _ = writeln!(t, "note: {w}");
        }
        t
    }
}

impl NiahImport {
    /// `--json`: format, cells (summed over needles per (context_len, depth)), the cells per
    /// needle, files.
    pub fn json(&self) -> Value {
        let files: serde_json::Map<String, Value> =
            self.files.iter().map(|(f, v)| (f.name().to_string(), json!(v.len()))).collect();
        json!({
            "format": self.format_name(),
            "cells": self.by_cell(),
            "by_needle": self.cells,
            "files": files,
            "skipped_files": self.skipped,
            "notes": self.notes,
            "index_topk": self.options.index_topk,
            "min_score": self.options.min_score,
        })
    }
}
