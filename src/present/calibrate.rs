//! The calibration's presenter: the text and JSON of a `CalibrationReport` (`calibrate`, and
//! inside `verdict --data --fit` and calibration experiments) and of the ranked hypotheses. The
//! report's `to_json` and `to_text` are implemented here, so that a front end prints it with a
//! method call while its rendering lives with the other presenters.

use crate::calibrate::hypotheses::HypothesisResult;
use crate::calibrate::report::CalibrationReport;
use crate::scenario::Field;
use serde_json::{json, Map, Value};
use std::fmt::Write as _;

/// How prediction bands are computed (printed with them).
pub(crate) const BAND_METHOD: &str = "profile likelihood: the range of the predicted recall over the 95% likelihood-ratio region {θ: 2(ℓ̂ − ℓ(θ)) ≤ χ²₁,0.95 = 3.84} of the fit (not a bootstrap)";
/// How parameter intervals are computed.
pub(crate) const INTERVAL_METHOD: &str = "95% profile likelihood (other free parameters re-maximised at each point)";

fn num(x: f64) -> Value {
    if x.is_finite() {
        json!(x)
    } else {
        Value::Null
    }
}

fn opt(x: Option<f64>) -> Value {
    x.map_or(Value::Null, num)
}

/// A grid value as JSON: a number when it parses as one, else the string.
pub(crate) fn point_value(v: &str) -> Value {
    match v.parse::<f64>() {
        Ok(x) if x.is_finite() => {
            if x.fract() == 0.0 && x.abs() < 9e15 {
                json!(x as i64)
            } else {
                json!(x)
            }
        }
        _ => json!(v),
    }
}

impl CalibrationReport {
    /// The JSON object of `dsa-sim calibrate --json`.
    pub fn to_json(&self) -> Value {
        let mut est = Map::new();
        for e in &self.fit.estimates {
            est.insert(
                e.field.name().to_string(),
                json!({
                    "value": num(e.value), "ci_low": num(e.ci_low), "ci_high": num(e.ci_high),
                    "identifiable": e.identifiable, "value_at_bound": e.value_at_bound, "low_at_bound": e.low_at_bound, "high_at_bound": e.high_at_bound,
                    "bounds": [e.bounds.0, e.bounds.1],
                }),
            );
        }
        let rows: Vec<Value> = self
            .fit
            .rows
            .iter()
            .map(|r| {
                let o = &r.obs;
                let mut m = Map::new();
                m.insert("line".into(), json!(o.line));
                m.insert("context_len".into(), json!(o.context_len));
                m.insert("index_topk".into(), json!(o.index_topk));
                m.insert("trials".into(), json!(o.trials));
                m.insert("hits".into(), json!(o.hits));
                if let Some(d) = o.depth {
                    m.insert("depth".into(), json!(d));
                }
                if let Some(v) = o.repeat {
                    m.insert("repeat".into(), json!(v));
                }
                if let Some(v) = o.compress_ratio {
                    m.insert("compress_ratio".into(), json!(v));
                }
                if let Some(v) = o.window {
                    m.insert("window".into(), json!(v));
                }
                if let Some(l) = &o.label {
                    m.insert("label".into(), json!(l));
                }
                m.insert("observed".into(), num(o.observed()));
                m.insert("fitted".into(), num(r.fitted));
                m.insert("pearson_residual".into(), num(r.pearson));
                m.insert("deviance_residual".into(), num(r.deviance_residual));
                Value::Object(m)
            })
            .collect();
        let hyps: Value = match &self.hypotheses {
            None => Value::Array(vec![]),
            Some(h) => hypotheses_json(h),
        };
        let preds: Vec<Value> = self
            .predictions
            .iter()
            .map(|p| {
                let mut m = Map::new();
                for (f, v) in &p.point {
                    m.insert(f.name().to_string(), point_value(v));
                }
                m.insert("recall".into(), num(p.recall));
                m.insert("beyond_kernel_max".into(), json!(self.beyond_kernel_max(p)));
                m.insert("ci_low".into(), num(p.ci_low));
                m.insert("ci_high".into(), num(p.ci_high));
                Value::Object(m)
            })
            .collect();
        json!({
            "estimates": est,
            "deviance": num(self.fit.deviance),
            "df": self.fit.df,
            "gof_p": opt(self.fit.gof_p),
            "loglik": num(self.fit.loglik),
            "aic": num(self.fit.aic),
            "rows": rows,
            "overdispersion": self.fit.overdispersion.as_ref().map_or(Value::Null, |o| json!({
                "rho": num(o.rho), "ci_low": num(o.ci_low), "ci_high": num(o.ci_high),
                "mean_trials": num(o.mean_trials), "design_effect": num(o.design_effect),
            })),
            "hypotheses": hyps,
            "row_checks": self.checks.as_ref().map_or(Value::Null, |c| json!(c)),
            "predictions": preds,
            "interval_method": INTERVAL_METHOD,
            "band_method": BAND_METHOD,
            "engine": self.engine,
            "data": {
                "source": self.data.source,
                "rows": self.data.rows.len(),
                "notes": self.data.notes,
                "transcribed": self.data.transcribed,
                "provenance": self.data.provenance,
            },
            "warnings": self.warnings(),
            "scenario": serde_json::to_value(&self.base).unwrap_or(Value::Null),
        })
    }

    /// Human-readable report.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for w in self.warnings() {
            let _ = writeln!(s, "{w}");
        }
        for n in &self.data.notes {
            let _ = writeln!(s, "note: {n}");
        }
        let _ = writeln!(
            s,
            "calibrated {} on {} rows ({} trials) of {}; engine: {}",
            self.free.iter().map(|p| p.field.name()).collect::<Vec<_>>().join(", "),
            self.data.rows.len(),
            self.data.total_trials(),
            self.data.source,
            self.engine
        );
        let _ = writeln!(s, "\nestimates ({INTERVAL_METHOD}):");
        for e in &self.fit.estimates {
            let mut flags = Vec::new();
            if e.value_at_bound {
                flags.push("ESTIMATE ON THE SEARCH BOUND".to_string());
            }
            if !e.identifiable {
                flags.push("UNIDENTIFIABLE: flat profile".to_string());
            } else {
                if e.low_at_bound {
                    flags.push(format!("lower end at the search bound {}", e.bounds.0));
                }
                if e.high_at_bound {
                    flags.push(format!("upper end at the search bound {}", e.bounds.1));
                }
            }
            let _ = writeln!(
                s,
                "  {:<15} {:>9.4}   95% [{:.4}, {:.4}]{}",
                e.field,
                e.value,
                e.ci_low,
                e.ci_high,
                if flags.is_empty() { String::new() } else { format!("   ({})", flags.join("; ")) }
            );
        }
        if let Some(o) = &self.fit.overdispersion {
            let _ = writeln!(
                s,
                "  {:<15} {:>9.4}   95% [{:.4}, {:.4}]   (needle-level: the correlation of two trials of one needle)",
                "overdispersion", o.rho, o.ci_low, o.ci_high
            );
            let _ = writeln!(
                s,
                "  the rows carry needle ids: a row's hit count varies {:.2} times the binomial's ({:.1} trials per needle), so \
                 independent-trial intervals would be {:.2} times too narrow; the intervals above allow for it",
                o.design_effect,
                o.mean_trials,
                o.design_effect.sqrt()
            );
        }
        let _ = writeln!(
            s,
            "\ngoodness of fit: deviance {:.3} on {} df, p = {}   (log-likelihood {:.3}, AIC {:.3})",
            self.fit.deviance,
            self.fit.df,
            self.fit.gof_p.map_or("n/a (no residual df)".into(), |p| format!("{p:.4}")),
            self.fit.loglik,
            self.fit.aic
        );
        let _ = writeln!(
            s,
            "\n  {:>9} {:>6} {:>6} {:>9} {:>9} {:>9}  label",
            "L", "k", "hits", "observed", "fitted", "pearson"
        );
        for r in &self.fit.rows {
            let o = &r.obs;
            let mut extra = String::new();
            if let Some(v) = o.repeat {
                extra.push_str(&format!(" r={v}"));
            }
            if let Some(v) = o.compress_ratio {
                extra.push_str(&format!(" c={v}"));
            }
            if let Some(v) = o.depth {
                extra.push_str(&format!(" depth={v}"));
            }
            let pearson = if r.pearson.is_nan() { "—".to_string() } else { format!("{:.2}", r.pearson) };
            let _ = writeln!(
                s,
                "  {:>9} {:>6} {:>6} {:>9.3} {:>9.3} {:>9}  {}{}",
                o.context_len,
                o.index_topk,
                format!("{}/{}", o.hits, o.trials),
                o.observed(),
                r.fitted,
                pearson,
                o.label.clone().unwrap_or_default(),
                extra
            );
        }
        if self.fit.rows.iter().any(|r| r.pearson.is_nan()) {
            let _ = writeln!(
                s,
                "  —: the model's recall is {{0, 1}} there and the row disagrees: a selection-independent miss (row checks below), not a residual"
            );
        }
        if let Some(c) = &self.checks {
            s.push('\n');
            s.push_str(&c.text());
        }
        if let Some(h) = &self.hypotheses {
            s.push('\n');
            s.push_str(&hypotheses_text(h));
        }
        if !self.predictions.is_empty() {
            // The rows' own geometry does not carry over: say which scenario the grid varies.
            let on_grid = |f: Field| self.predictions[0].point.iter().any(|(g, _)| *g == f);
            let from: Vec<String> =
                [Field::ContextLen, Field::IndexTopk, Field::CompressRatio, Field::Window, Field::Depth, Field::Repeat]
                    .into_iter()
                    .filter(|f| !on_grid(*f))
                    .filter_map(|f| self.base.number(f).map(|v| format!("{f}={v}")))
                    .collect();
            let _ = writeln!(s, "\npredictions (95% band: {BAND_METHOD}):");
            let _ = writeln!(s, "  from the command-line scenario with the fit substituted: {}", from.join(" "));
            for p in &self.predictions {
                let at: Vec<String> = p.point.iter().map(|(f, v)| format!("{f}={v}")).collect();
                let mark = if self.beyond_kernel_max(p) {
                    format!("   (k beyond the kernel maximum {}: not reachable by raising k)", self.base.max_topk)
                } else {
                    String::new()
                };
                let _ = writeln!(
                    s,
                    "  {:<40} recall {:.4}   95% [{:.4}, {:.4}]{mark}",
                    at.join(" "),
                    p.recall,
                    p.ci_low,
                    p.ci_high
                );
            }
        }
        s
    }
}

/// The hypotheses as JSON (ranked by AIC).
pub fn hypotheses_json(h: &[HypothesisResult]) -> Value {
    Value::Array(
        h.iter()
            .map(|x| {
                json!({
                    "name": x.hypothesis, "description": x.hypothesis.description(), "k": x.k,
                    "aic": num(x.aic), "delta_aic": num(x.delta_aic), "weight": num(x.weight),
                    "loglik": num(x.loglik), "deviance": num(x.deviance), "gof_p": opt(x.gof_p),
                    "estimates": x.estimates.iter().map(|(f, v)| (f.clone(), num(*v))).collect::<Map<_, _>>(),
                    "on_bound": x.on_bound,
                    "fixed": x.fixed.iter().map(|(f, v)| (f.name().to_string(), num(*v))).collect::<Map<_, _>>(),
                })
            })
            .collect(),
    )
}

/// The hypotheses as a text table, estimates on a search bound marked `(bound)`.
pub fn hypotheses_text(h: &[HypothesisResult]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "hypotheses (ranked by AIC, those with plausible estimates first within ΔAIC {} of the lowest; `(bound)`: estimate on a search bound, not a value the data support):",
        crate::calibrate::hypotheses::AIC_TIE
    );
    let _ = writeln!(
        s,
        "  {:<28} {:>2} {:>10} {:>8} {:>8} {:>9}  estimates",
        "name", "k", "AIC", "ΔAIC", "weight", "fit p"
    );
    for x in h {
        let est: Vec<String> = x
            .estimates
            .iter()
            .map(|(f, v)| format!("{f}={v:.3}{}", if x.on_bound.contains(f) { "(bound)" } else { "" }))
            .collect();
        let _ = writeln!(
            s,
            "  {:<28} {:>2} {:>10.3} {:>8.3} {:>8.4} {:>9}  {}",
            x.hypothesis,
            x.k,
            x.aic,
            x.delta_aic,
            x.weight,
            x.gof_p.map_or("-".into(), |p| format!("{p:.2e}")),
            if est.is_empty() { "(none free)".to_string() } else { est.join(" ") }
        );
    }
    s
}
