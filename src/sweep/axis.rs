//! Sweep axes: `FIELD=V1,V2,…` with ranges `A..B:xF` (geometric), `A..B:N` (N evenly spaced
//! points) and `A..B:+S` (arithmetic step).

use super::SweepError;
use crate::scenario::{field_names, Field, Scenario, Value};

/// One axis of a sweep grid: a scenario field and the values it takes, in order.
#[derive(Debug, Clone, PartialEq)]
pub struct Axis {
    /// The field.
    pub field: Field,
    /// The values, parsed once when the axis is built.
    pub values: Vec<Value>,
    /// The values as written (ranges expanded): figure labels use them.
    pub texts: Vec<String>,
}

/// Most points one range may expand to (a typo such as `1..1e9:+1` fails fast instead).
pub const MAX_RANGE_POINTS: usize = 100_000;

impl Axis {
    /// Parses `FIELD=SPEC` where SPEC is a comma-separated list of values and ranges.
    pub fn parse(text: &str) -> Result<Axis, SweepError> {
        let (field, spec) = text.split_once('=').ok_or_else(|| {
            SweepError::Input(format!("axis `{text}`: expected FIELD=V1,V2,… or FIELD=A..B:xF / A..B:N / A..B:+S"))
        })?;
        Axis::from_spec(field, spec)
    }

    /// Builds an axis from a field name and a value specification (see [`Axis::parse`]).
    pub(crate) fn from_spec(field: &str, spec: &str) -> Result<Axis, SweepError> {
        let field = canonical_field(field)?;
        let texts = parse_values(field, spec)?;
        Axis::from_texts(field, texts)
    }

    /// Builds an axis from explicit values, parsing each as the field's type.
    pub fn from_values(field: &str, texts: Vec<String>) -> Result<Axis, SweepError> {
        Axis::from_texts(canonical_field(field)?, texts)
    }

    /// Builds an axis of `field` from its values as text, parsing each as the field's type.
    pub(crate) fn from_texts(field: Field, texts: Vec<String>) -> Result<Axis, SweepError> {
        if texts.is_empty() {
            return Err(SweepError::Input(format!("axis `{field}` has no values")));
        }
        let mut probe = Scenario::default();
        let mut values = Vec::with_capacity(texts.len());
        for v in &texts {
            probe.set_text(field, v).map_err(|e| SweepError::Input(format!("axis `{field}`: {e}")))?;
            values.push(probe.get(field));
        }
        Ok(Axis { field, values, texts })
    }

    /// The value at index `i` as a number (count and real fields).
    pub fn number(&self, i: usize) -> Option<f64> {
        self.values.get(i).and_then(Value::as_f64)
    }
}

/// The scenario field named `field` (snake or kebab case), or an input error naming the known
/// fields.
pub fn canonical_field(field: &str) -> Result<Field, SweepError> {
    Field::from_name(field).map_err(|_| {
        SweepError::Input(format!("unknown field `{}` (known fields: {})", field.trim(), field_names().join(", ")))
    })
}

/// Formats a number for a sweep value: at most 12 significant digits, shortest form.
pub fn fmt_num(x: f64) -> String {
    if x == 0.0 {
        return "0".to_string();
    }
    let rounded: f64 = format!("{x:.11e}").parse().unwrap_or(x);
    format!("{rounded}")
}

fn parse_num(field: Field, text: &str, what: &str) -> Result<f64, SweepError> {
    let t = text.trim().replace('_', "");
    // Integer fields take token-count suffixes in range bounds and steps as in values: 1Ki..1Mi:x2.
    if !field.is_real() {
        if let Some(r) = crate::scenario::parse_suffixed_count(&t) {
            return r
                .map(|x| x as f64)
                .map_err(|why| SweepError::Input(format!("axis `{field}`: range {what} `{}`: {why}", text.trim())));
        }
    }
    t.parse::<f64>()
        .ok()
        .filter(|x| x.is_finite())
        .ok_or_else(|| SweepError::Input(format!("axis `{field}`: range {what} `{}` is not a number", text.trim())))
}

/// Expands a value specification into its values (ranges expanded, in the order written).
pub fn parse_values(field: Field, spec: &str) -> Result<Vec<String>, SweepError> {
    let mut out = Vec::new();
    for item in spec.split(',') {
        let item = item.trim();
        if item.is_empty() {
            if spec.trim().is_empty() {
                return Err(SweepError::Input(format!("axis `{field}` has no values")));
            }
            return Err(SweepError::Input(format!("axis `{field}`: empty value in `{spec}`")));
        }
        if item.contains("..") {
            out.extend(expand_range(field, item)?);
        } else {
            out.push(item.to_string());
        }
    }
    if out.len() > MAX_RANGE_POINTS {
        return Err(SweepError::Input(format!("axis `{field}`: {} values (at most {MAX_RANGE_POINTS})", out.len())));
    }
    Ok(out)
}

fn expand_range(field: Field, item: &str) -> Result<Vec<String>, SweepError> {
    let bad = |why: &str| {
        SweepError::Input(format!(
            "axis `{field}`: range `{item}` {why} (expected A..B:xF geometric, A..B:N points or A..B:+S step)"
        ))
    };
    let (bounds, step) = item.split_once(':').ok_or_else(|| bad("has no step"))?;
    let (a, b) = bounds.split_once("..").ok_or_else(|| bad("has no `..`"))?;
    let a = parse_num(field, a, "start")?;
    let b = parse_num(field, b, "end")?;
    let step = step.trim();
    let eps = 1e-9 * a.abs().max(b.abs()).max(1e-300);
    let mut xs = Vec::new();
    if let Some(f) = step.strip_prefix('x').or_else(|| step.strip_prefix('*')) {
        let f = parse_num(field, f, "factor")?;
        if !(a > 0.0 && b > 0.0) {
            return Err(bad("needs positive bounds for a geometric step"));
        }
        if !((f > 1.0 && b >= a) || (f > 0.0 && f < 1.0 && b <= a)) {
            return Err(bad("has a factor that never reaches the end"));
        }
        let mut i = 0i32;
        loop {
            let x = a * f.powi(i);
            if (f > 1.0 && x > b * (1.0 + 1e-9)) || (f < 1.0 && x < b * (1.0 - 1e-9)) {
                break;
            }
            xs.push(x);
            i += 1;
            if xs.len() > MAX_RANGE_POINTS {
                return Err(bad("has too many points"));
            }
        }
    } else if let Some(s) = step.strip_prefix('+') {
        let s = parse_num(field, s, "step")?;
        if s.is_nan() || s <= 0.0 || b < a {
            return Err(bad("needs a positive step and end ≥ start"));
        }
        let n = ((b - a + eps) / s).floor();
        if n >= MAX_RANGE_POINTS as f64 {
            return Err(bad("has too many points"));
        }
        xs.extend((0..=n as usize).map(|i| a + s * i as f64));
    } else {
        let n: usize = step.parse().map_err(|_| bad("has a step that is not xF, N or +S"))?;
        if n == 0 {
            return Err(bad("asks for 0 points"));
        }
        if n > MAX_RANGE_POINTS {
            return Err(bad("has too many points"));
        }
        if n == 1 {
            xs.push(a);
        } else {
            xs.extend((0..n).map(|i| if i == n - 1 { b } else { a + (b - a) * i as f64 / (n - 1) as f64 }));
        }
    }
    let mut out: Vec<String> = Vec::with_capacity(xs.len());
    for x in xs {
        let text = if !field.is_real() {
            let r = x.round();
            if (x - r).abs() > 1e-6 * x.abs().max(1.0) && step.starts_with('+') {
                return Err(bad("gives non-integer values for an integer field"));
            }
            format!("{}", r as i128)
        } else {
            fmt_num(x)
        };
        if out.last() != Some(&text) {
            out.push(text);
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vals(spec: &str) -> Vec<String> {
        Axis::parse(spec).unwrap().texts
    }

    #[test]
    fn lists_and_kebab_names() {
        assert_eq!(vals("index-topk=512,1024, 2048"), ["512", "1024", "2048"]);
        assert_eq!(Axis::parse("index-topk=1").unwrap().field, Field::IndexTopk);
        assert_eq!(Axis::parse("index-topk=1").unwrap().values, [Value::Count(1)]);
        assert_eq!(vals("pooling=mean,max"), ["mean", "max"]);
        assert_eq!(vals("distractor=normal,student_t:4"), ["normal", "student_t:4"]);
    }

    #[test]
    fn geometric_ranges() {
        let v = vals("context_len=1024..1048576:x2");
        assert_eq!(v.len(), 11);
        assert_eq!(v[0], "1024");
        assert_eq!(v[10], "1048576");
        assert_eq!(vals("context_len=1000..1000000:x10"), ["1000", "10000", "100000", "1000000"]);
        assert_eq!(vals("score_noise=0.1..0.8:x2"), ["0.1", "0.2", "0.4", "0.8"]);
        // Rounded integer values never repeat.
        let v = vals("window=1..10:x1.2");
        assert!(v.windows(2).all(|w| w[0] != w[1]), "{v:?}");
    }

    #[test]
    fn linear_ranges() {
        let v = vals("depth=0..1:11");
        assert_eq!(v, ["0", "0.1", "0.2", "0.3", "0.4", "0.5", "0.6", "0.7", "0.8", "0.9", "1"]);
        assert_eq!(vals("dprime=0..3:+0.5"), ["0", "0.5", "1", "1.5", "2", "2.5", "3"]);
        assert_eq!(vals("dprime=2..2:1"), ["2"]);
        assert_eq!(vals("repeat=1,2..4:+1,8"), ["1", "2", "3", "4", "8"]);
        assert_eq!(vals("index_topk=512..2048:3"), ["512", "1280", "2048"]);
    }

    #[test]
    fn token_count_suffixes_in_values_and_ranges() {
        assert_eq!(vals("context_len=16K,16Ki,1M,1Mi"), ["16K", "16Ki", "1M", "1Mi"]);
        let a = Axis::parse("context_len=16K,16Ki,1M,1Mi").unwrap();
        assert_eq!(
            a.values,
            [Value::Count(16_000), Value::Count(16_384), Value::Count(1_000_000), Value::Count(1 << 20)]
        );
        assert_eq!(vals("context_len=1Ki..8Ki:x2"), ["1024", "2048", "4096", "8192"]);
        assert_eq!(vals("index_topk=512..2Ki:+512"), ["512", "1024", "1536", "2048"]);
        assert_eq!(vals("context_len=1K..3K:3"), ["1000", "2000", "3000"]);
        let e = Axis::parse("context_len=1.0001K..2K:x2").unwrap_err().to_string();
        assert!(e.contains("start `1.0001K`: not a whole number"), "{e}");
        assert!(Axis::parse("dprime=1K,2").is_err(), "real fields take no suffix");
    }

    #[test]
    fn bad_axes_are_input_errors_naming_the_problem() {
        for (spec, needle) in [
            ("contxt_len=1,2", "unknown field `contxt_len`"),
            ("context_len=", "no values"),
            ("context_len", "expected FIELD="),
            ("context_len=1024..x2", "no step"),
            ("context_len=1024..2048:y2", "not xF, N or +S"),
            ("context_len=abc..2048:x2", "start `abc`"),
            ("context_len=0..2048:x2", "positive bounds"),
            ("context_len=2048..1024:x2", "never reaches"),
            ("context_len=1..1e9:+1", "too many"),
            ("depth=0..1:0", "0 points"),
            ("depth=0.5,,0.7", "empty value"),
            ("context_len=1.5", "context_len"),
            ("pooling=avg", "pooling"),
            ("repeat=1..2:+0.5", "non-integer"),
        ] {
            let e = Axis::parse(spec).unwrap_err();
            assert!(matches!(e, SweepError::Input(_)), "{spec}: {e}");
            assert!(e.to_string().contains(needle), "{spec}: {e}");
            assert!(!e.to_string().contains('\n'));
        }
    }
}
