//! A memo of recall evaluations. The engines' recall is a deterministic function of the
//! scenario (analytic, or Monte Carlo with common random numbers: trial i always draws from
//! (seed, i)), so remembering it is exact: the optimiser's revisits, the profile and region
//! searches that restart from known points, the hypotheses that share a scenario (dprime = 0,
//! the never-selected checks) and the verdict's searches evaluate each distinct scenario once.

use crate::engine::{with_noise, with_topk, EngineError, KCurve, NoiseCurve, RecallModel};
use crate::scenario::Scenario;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// A [`RecallModel`] that evaluates each distinct scenario once, optionally reporting every
/// evaluation it makes (for a progress display).
pub struct CachedModel<'a> {
    inner: &'a dyn RecallModel,
    memo: Mutex<HashMap<String, f64>>,
    evaluations: AtomicU64,
    lookups: AtomicU64,
    on_evaluation: Option<Box<dyn Fn(u64) + Send + Sync + 'a>>,
}

impl<'a> CachedModel<'a> {
    /// Wraps `inner`.
    pub fn new(inner: &'a dyn RecallModel) -> CachedModel<'a> {
        CachedModel {
            inner,
            memo: Mutex::new(HashMap::new()),
            evaluations: AtomicU64::new(0),
            lookups: AtomicU64::new(0),
            on_evaluation: None,
        }
    }
    /// Calls `f(evaluations so far)` after every evaluation of the inner model.
    pub(crate) fn with_observer(mut self, f: impl Fn(u64) + Send + Sync + 'a) -> Self {
        self.on_evaluation = Some(Box::new(f));
        self
    }
    /// (evaluations of the inner model, lookups).
    #[cfg(test)]
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.evaluations.load(Ordering::Relaxed), self.lookups.load(Ordering::Relaxed))
    }
}

/// A recall curve over one field's value x (a [`KCurve`] or a [`NoiseCurve`]).
type Curve<'b, X> = Box<dyn Fn(X) -> Result<f64, EngineError> + 'b>;

impl CachedModel<'_> {
    /// A curve of `s` over one field through the memo: the point x is the scenario `at(s, x)`,
    /// looked up first; the inner model's curve `make(s)` is made at the first point not
    /// remembered (for Monte Carlo one run that answers every point) and kept for the others.
    fn memo_curve<'b, X: Copy + 'b>(
        &'b self,
        s: &Scenario,
        at: impl Fn(&Scenario, X) -> Result<Scenario, EngineError> + 'b,
        make: impl Fn(&Scenario) -> Result<Curve<'b, X>, EngineError> + 'b,
    ) -> Curve<'b, X> {
        let s = s.clone();
        let inner: RefCell<Option<Curve<'b, X>>> = RefCell::new(None);
        Box::new(move |x| {
            let key = self.inner.evaluation_key(&at(&s, x)?);
            if let Some(v) = self.lookup(&key) {
                return Ok(v);
            }
            let mut curve = inner.borrow_mut();
            let v = match curve.as_ref() {
                Some(c) => c(x)?,
                None => {
                    let c = make(&s)?;
                    let v = c(x)?;
                    *curve = Some(c);
                    v
                }
            };
            self.remember(key, v);
            Ok(v)
        })
    }
    /// The remembered recall of the scenario whose key is `key`, counting the lookup.
    fn lookup(&self, key: &str) -> Option<f64> {
        self.lookups.fetch_add(1, Ordering::Relaxed);
        self.memo.lock().ok().and_then(|m| m.get(key).copied())
    }

    /// Remembers an evaluation of the inner model and reports it.
    fn remember(&self, key: String, v: f64) {
        if let Ok(mut m) = self.memo.lock() {
            m.insert(key, v);
        }
        let n = self.evaluations.fetch_add(1, Ordering::Relaxed) + 1;
        if let Some(f) = &self.on_evaluation {
            f(n);
        }
    }
}

impl RecallModel for CachedModel<'_> {
    fn recall(&self, s: &Scenario) -> Result<f64, EngineError> {
        let key = self.inner.evaluation_key(s);
        if let Some(v) = self.lookup(&key) {
            return Ok(v);
        }
        let v = self.inner.recall(s)?;
        self.remember(key, v);
        Ok(v)
    }
    /// Each k through the memo; the inner model's curve is made at the first k not in it (for
    /// Monte Carlo one run that answers every k), so remembered ks cost nothing.
    fn recall_in_k<'b>(&'b self, s: &Scenario) -> Result<KCurve<'b>, EngineError> {
        Ok(self.memo_curve(s, |s, k| Ok(with_topk(s, k)), |s| self.inner.recall_in_k(s)))
    }
    /// [`CachedModel::recall_in_k`]'s memo over noise levels instead of k.
    fn recall_in_noise<'b>(&'b self, s: &Scenario) -> Result<NoiseCurve<'b>, EngineError> {
        Ok(self.memo_curve(s, with_noise, |s| self.inner.recall_in_noise(s)))
    }
    fn describe(&self) -> String {
        self.inner.describe()
    }
    fn expect_k_curves(&self, ss: &[Scenario]) {
        self.inner.expect_k_curves(ss)
    }
    fn evaluation_key(&self, s: &Scenario) -> String {
        self.inner.evaluation_key(s)
    }
    fn parallel_rows(&self) -> bool {
        self.inner.parallel_rows()
    }
    fn is_exact(&self, s: &Scenario) -> bool {
        self.inner.is_exact(s)
    }
    fn noise_curve_draws(&self, s: &Scenario) -> u64 {
        self.inner.noise_curve_draws(s)
    }
    fn shares_across_layers(&self) -> bool {
        self.inner.shares_across_layers()
    }
    fn layer_count_pmf(&self, s: &Scenario) -> Result<Vec<f64>, EngineError> {
        // Not memoised: selection fits evaluate each distinct cell once per likelihood anyway,
        // and only the exact engine computes it.
        self.inner.layer_count_pmf(s)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::FnModel;

    #[test]
    fn evaluates_each_scenario_once_and_returns_the_same_value() {
        let calls = AtomicU64::new(0);
        let inner = FnModel(
            |s: &Scenario| {
                calls.fetch_add(1, Ordering::Relaxed);
                s.dprime / 10.0
            },
            "test",
        );
        let m = CachedModel::new(&inner);
        let a = Scenario { dprime: 3.0, ..Scenario::default() };
        let b = Scenario { dprime: 4.0, ..Scenario::default() };
        for _ in 0..3 {
            assert_eq!(m.recall(&a).unwrap(), 0.3);
            assert_eq!(m.recall(&b).unwrap(), 0.4);
        }
        assert_eq!(calls.load(Ordering::Relaxed), 2);
        assert_eq!(m.counts(), (2, 6));
    }
}
