//! Helpers shared by the integration tests (`mod common;` in each test file that uses them).

use std::collections::BTreeMap;
use std::path::Path;

/// Every file and folder under `dir` (hidden ones included) with its bytes; folders
/// as `name/`, anything that is neither file nor folder (a FIFO, a socket) as `name (special)`.
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
