//! Helpers shared by the integration tests (`mod common;` in the main.rs of each tests/ folder
//! whose files use them, as `crate::common`).

use std::collections::BTreeMap;
use std::path::Path;

/// Every file and folder under `dir` (hidden ones included) with its bytes; folders
/// as `name/`, anything that is neither file nor folder (a FIFO, a socket) as `name (special)`.
#[allow(dead_code)] // each test binary compiles this module, not each uses every helper
pub fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, Vec<u8>>) {
        for e in std::fs::read_dir(dir).unwrap() {
            let e = e.unwrap();
            let p = e.path();
            let rel = p.strip_prefix(root).unwrap().to_string_lossy().into_owned();
            let t = e.file_type().unwrap();
            if t.is_dir() {
                out.insert(format!("{rel}/"), Vec::new());
                walk(root, &p, out);
            } else if t.is_file() {
                out.insert(rel, std::fs::read(&p).unwrap());
            } else {
                out.insert(format!("{rel} (special)"), Vec::new());
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(dir, dir, &mut out);
    out
}

/// Every file under `dir` (folders left out), sorted.
#[allow(dead_code)]
pub fn paths(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p);
            }
        }
    }
    out.sort();
    out
}

/// Every file under `dir` (folders left out) with its bytes, keyed by its path relative to `dir`:
/// what two result folders are compared by.
#[allow(dead_code)]
pub fn files(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    paths(dir)
        .into_iter()
        .map(|p| (p.strip_prefix(dir).unwrap().display().to_string(), std::fs::read(&p).unwrap()))
        .collect()
}

/// A `.npy` file per the NPY format 1.0 spec, written here so the tests do not depend on the
/// crate the readers use: magic, version, header length (LE u16), a Python-literal dict padded
/// with spaces to a 64-byte boundary ending in `\n`, then `data` (already little-endian).
#[allow(dead_code)] // each test binary compiles this module, not each uses every helper
pub fn npy(descr: &str, shape: &[usize], data: &[u8]) -> Vec<u8> {
    let dims: Vec<String> = shape.iter().map(|d| d.to_string()).collect();
    let shape = if dims.len() == 1 { format!("({},)", dims[0]) } else { format!("({})", dims.join(", ")) };
    let mut header = format!("{{'descr': '{descr}', 'fortran_order': False, 'shape': {shape}, }}").into_bytes();
    let total = 10 + header.len() + 1;
    header.extend(std::iter::repeat_n(b' ', (64 - total % 64) % 64));
    header.push(b'\n');
    let mut out = b"\x93NUMPY\x01\x00".to_vec();
    out.extend_from_slice(&(header.len() as u16).to_le_bytes());
    out.extend_from_slice(&header);
    out.extend_from_slice(data);
    out
}

/// A vector-model scenario: one layer of preset `base` (the defaults when empty) with `fields`
/// set from text, validated.
#[allow(dead_code)] // not every test file that includes this module uses it
pub fn vector_scenario(base: &str, fields: &[(&str, &str)]) -> dsa_sim::Scenario {
    use dsa_sim::Scenario;
    let mut s = if base.is_empty() { Scenario::default() } else { Scenario::preset(base).unwrap().one_layer() };
    s.model = dsa_sim::scenario::Model::Vector;
    for (f, v) in fields {
        s.set_text(f.parse().unwrap(), v).unwrap();
    }
    s.validate().unwrap();
    s
}

/// Needle recall when the needle (Normal(dprime, needle_sd² + σ²)) must beat the distractor
/// quantile 1 − k/N (distractors Normal(0, 1 + σ²)); r copies; p_read / p_guess.
#[allow(dead_code)]
pub fn toy_probit(s: &dsa_sim::Scenario) -> f64 {
    let n = (s.context_len / s.compress_ratio).max(1) as f64;
    let k = s.index_topk as f64;
    let q = if k >= n {
        1.0
    } else {
        use statrs::distribution::ContinuousCDF;
        let z = statrs::distribution::Normal::new(0.0, 1.0).unwrap();
        let t = z.inverse_cdf(1.0 - k / n);
        let sn2 = s.score_noise * s.score_noise;
        let q1 = z.cdf((s.dprime - t * (1.0 + sn2).sqrt()) / (s.needle_sd * s.needle_sd + sn2).sqrt());
        1.0 - (1.0 - q1).powi(s.repeat as i32)
    };
    s.p_guess + (s.p_read - s.p_guess) * q
}
