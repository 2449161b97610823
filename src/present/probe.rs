//! The `--json` objects and summaries of `probe` and `probe --dry-run`.

use crate::probe::{DryRun, Probed};

impl DryRun {
    /// `--dry-run --json`.
    pub fn to_json(&self) -> serde_json::Value {
        serde_json::json!({"dry_run": true, "cells": self.cells, "concurrency": self.concurrency, "spread": self.spread, "requests": self.requests, "prompt_tokens": self.tokens})
    }
    /// `--dry-run`.
    pub fn to_text(&self) -> String {
        let mut s =
            format!("{} cells:\n  {:>9} {:>6} {:>6} {:>7}\n", self.cells.len(), "tokens", "depth", "repeat", "trials");
        for c in &self.cells {
            s.push_str(&format!("  {:>9} {:>6} {:>6} {:>7}\n", c.context_len, c.depth, c.repeat, c.trials));
        }
        if self.spread > 1 {
            s.push_str(&format!(
                "each cell's trial t at tokens + t mod {} (every residue mod {}; the table records each exact length)\n",
                self.spread, self.spread
            ));
        }
        if !self.concurrency.is_empty() {
            s.push_str(&format!(
                "each at concurrency {}\n",
                self.concurrency.iter().map(u32::to_string).collect::<Vec<_>>().join(", ")
            ));
        }
        s.push_str(&format!(
            "{} requests, {} prompt tokens (plus /tokenize calls when the server has it); nothing sent (--dry-run)\n",
            self.requests, self.tokens
        ));
        s
    }
}

impl Probed {
    /// `--json`.
    pub fn to_json(&self) -> serde_json::Value {
        let trials: u64 = self.rows.iter().map(|r| r.trials).sum();
        let hits: u64 = self.rows.iter().map(|r| r.hits).sum();
        serde_json::json!({
            "out": self.out.display().to_string(),
            "measured": self.out.join("measured.csv").display().to_string(),
            "transcript": self.out.join(crate::probe::transcript::FILE).display().to_string(),
            "manifest": (self.captures > 0).then(|| self.out.join("manifest.csv").display().to_string()),
            "server": self.server,
            "model": self.model,
            "token_count": self.token_count,
            "requests_sent": self.sent,
            "requests_resumed": self.resumed,
            "condition_columns": self.condition_columns,
            "rows": self.rows,
            "trials": trials,
            "hits": hits,
            "captures": self.captures,
            "needle_tokens": self.needle_tokens,
            "seed": self.seed,
            "notes": self.notes,
            "version": env!("CARGO_PKG_VERSION"),
        })
    }

    /// The summary.
    pub fn to_text(&self) -> String {
        let trials: u64 = self.rows.iter().map(|r| r.trials).sum();
        let hits: u64 = self.rows.iter().map(|r| r.hits).sum();
        let mut s = format!(
            "probed {} (model {}, tokens counted by {}): {} requests sent{}, {trials} counted, {hits} hits\n",
            self.server,
            self.model,
            self.token_count,
            self.sent,
            if self.resumed > 0 { format!(", {} resumed from the transcript", self.resumed) } else { String::new() }
        );
        let conds = if self.condition_columns.is_empty() {
            String::new()
        } else {
            format!("  {}", self.condition_columns.join(" / "))
        };
        s.push_str(&format!("  {:>9} {:>7} {:>6} {:>9}{conds}\n", "tokens", "depth", "repeat", "found"));
        for r in &self.rows {
            let c = if r.conditions.is_empty() { String::new() } else { format!("  {}", r.conditions.join(" / ")) };
            s.push_str(&format!(
                "  {:>9} {:>7} {:>6} {:>9}{c}\n",
                r.context_len,
                r.depth,
                r.repeat,
                format!("{}/{}", r.hits, r.trials)
            ));
        }
        for n in &self.notes {
            s.push_str(&format!("note: {n}\n"));
        }
        s.push_str(&format!(
            "wrote {} (measured.csv, transcript.jsonl{})\n",
            self.out.display(),
            if self.captures > 0 { format!(", {} captures and manifest.csv", self.captures) } else { String::new() }
        ));
        // No --needle-tokens to repeat: each row carries the needle's length as counted.
        s.push_str(&format!(
            "next: dsa-sim verdict --preset NAME --data {} (or probe --until-decided: the verdict, the plan and its cells in one command)\n",
            self.out.join("measured.csv").display(),
        ));
        if self.captures > 0 {
            s.push_str(&format!(
                "      dsa-sim import topk --manifest {} --layers L --index-topk {} --compress-ratio C --overlap BOOL --out selections.csv\n",
                self.out.join("manifest.csv").display(),
                self.rows.first().map_or(0, |r| r.index_topk)
            ));
        }
        s
    }
}
