//! The layer stack (docs/model.md#layer-stack): the model's attention layers by type and count,
//! and how the needle reaches the answer through them.
//!
//! A stack is a short list of entries `TYPE:COUNT[:FIELD=VALUE…]`. The types:
//!
//! - `csa`: compressed sparse attention — an indexer selects `index_topk` of the compressed
//!   entries (DeepSeek-V4, c = 4 with overlap), plus the sliding window;
//! - `dsa`: token-level sparse attention (DeepSeek-V3.2: c = 1);
//! - `hca`: heavily compressed attention — every compressed entry is read (V4, c = 128), no
//!   selection; the needle reaches the answer through it with probability `diluted_read`;
//! - `swa`: sliding-window attention only (V4's first layers);
//! - `dense`: full attention (Quest keeps the first two layers dense); like `hca`, it delivers
//!   the needle with probability `diluted_read` when it lies outside the window.
//!
//! The selecting layers (`csa`, `dsa`) take their geometry from the scenario's own fields
//! (compress_ratio, overlap, index_topk, window, sink); they are the `layers` of the readout. The
//! other types may override `window` and `sink` (and `hca` its `compress_ratio`, default 128,
//! which only documents the layer: the diluted read is one fitted probability).
//!
//! The type is `Copy` (a fixed array of at most [`MAX_STACK_ENTRIES`] entries) because every
//! field value is.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::str::FromStr;

/// Most entries a stack may have (types repeat rarely: V4-Pro needs three).
pub(crate) const MAX_STACK_ENTRIES: usize = 8;

/// Most layers one entry may count.
pub(crate) const MAX_STACK_LAYERS: u32 = 4096;

/// `n` as an entry's layer count, when it is one (1..=[`MAX_STACK_LAYERS`]).
fn layer_count(n: u64) -> Option<u32> {
    u32::try_from(n).ok().filter(|c| (1..=MAX_STACK_LAYERS).contains(c))
}

/// The compression ratio of an `hca` entry without an override (DeepSeek-V4's heavily
/// compressed layers: `compress_ratios` 128 in the released configs).
pub const HCA_DEFAULT_RATIO: u64 = 128;

/// One kind of attention layer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) enum LayerKind {
    /// Compressed sparse attention: an indexer selects among compressed entries.
    #[default]
    Csa,
    /// Token-level sparse attention (an indexer over tokens).
    Dsa,
    /// Heavily compressed attention: every compressed entry is read, none selected.
    Hca,
    /// Sliding-window attention only.
    Swa,
    /// Full (dense) attention.
    Dense,
}

impl LayerKind {
    const ALL: [(LayerKind, &'static str); 5] = [
        (LayerKind::Csa, "csa"),
        (LayerKind::Dsa, "dsa"),
        (LayerKind::Hca, "hca"),
        (LayerKind::Swa, "swa"),
        (LayerKind::Dense, "dense"),
    ];

    /// The keyword.
    pub(crate) fn name(self) -> &'static str {
        LayerKind::ALL.iter().find(|(k, _)| *k == self).map_or("csa", |(_, n)| n)
    }

    /// Whether the layer selects with an indexer (counts toward the readout's layers).
    pub(crate) fn selects(self) -> bool {
        matches!(self, LayerKind::Csa | LayerKind::Dsa)
    }

    /// Whether the layer reads the needle outside its window with probability `diluted_read`.
    pub(crate) fn reads_diluted(self) -> bool {
        matches!(self, LayerKind::Hca | LayerKind::Dense)
    }
}

impl fmt::Display for LayerKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for LayerKind {
    type Err = String;
    fn from_str(s: &str) -> Result<LayerKind, String> {
        let t = s.trim().to_ascii_lowercase();
        LayerKind::ALL.iter().find(|(_, n)| *n == t).map(|(k, _)| *k).ok_or_else(|| {
            format!("unknown layer type `{}` (known: csa, dsa, hca, swa, dense)", crate::input::echo(s.trim()))
        })
    }
}

/// One entry of a stack: `count` layers of one type, with optional geometry overrides.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct StackEntry {
    /// The layers' type.
    pub(crate) kind: LayerKind,
    /// How many layers.
    pub(crate) count: u32,
    /// `hca` only: tokens per compressed entry (default [`HCA_DEFAULT_RATIO`]).
    pub(crate) compress_ratio: Option<u64>,
    /// Non-selecting types: their sliding window (default: the scenario's `window`).
    pub(crate) window: Option<u64>,
    /// Non-selecting types: their attention sink (default: the scenario's `sink`).
    pub(crate) sink: Option<u64>,
}

impl StackEntry {
    /// The override fields an entry of this type accepts.
    fn allowed(kind: LayerKind) -> &'static [&'static str] {
        match kind {
            LayerKind::Csa | LayerKind::Dsa => &[],
            LayerKind::Hca => &["compress_ratio", "window", "sink"],
            LayerKind::Swa | LayerKind::Dense => &["window", "sink"],
        }
    }

    fn set(&mut self, key: &str, value: u64) -> Result<(), String> {
        let key = key.trim().replace('-', "_");
        if !StackEntry::allowed(self.kind).contains(&key.as_str()) {
            let why = if self.kind.selects() {
                format!(
                    "a {} entry takes its geometry from the scenario's own fields (compress_ratio, overlap, index_topk, window, sink): set `{key}` there",
                    self.kind
                )
            } else {
                format!("a {} entry may set {}", self.kind, StackEntry::allowed(self.kind).join(", "))
            };
            return Err(format!("`{}`: {why}", crate::input::echo(&key)));
        }
        match key.as_str() {
            "compress_ratio" if value == 0 => return Err("compress_ratio = 0: allowed ≥ 1".to_string()),
            "compress_ratio" => self.compress_ratio = Some(value),
            "window" => self.window = Some(value),
            _ => self.sink = Some(value),
        }
        Ok(())
    }

    /// The `hca` entry's compression ratio (its override or [`HCA_DEFAULT_RATIO`]); `None` for
    /// the other types.
    pub fn hca_ratio(&self) -> Option<u64> {
        (self.kind == LayerKind::Hca).then(|| self.compress_ratio.unwrap_or(HCA_DEFAULT_RATIO))
    }
}

impl fmt::Display for StackEntry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.kind, self.count)?;
        for (name, v) in [("compress_ratio", self.compress_ratio), ("window", self.window), ("sink", self.sink)] {
            if let Some(v) = v {
                write!(f, ":{name}={v}")?;
            }
        }
        Ok(())
    }
}

impl FromStr for StackEntry {
    type Err = String;
    fn from_str(s: &str) -> Result<StackEntry, String> {
        let mut parts = s.split(':');
        let kind: LayerKind = parts.next().unwrap_or("").parse()?;
        let count_text = parts
            .next()
            .ok_or_else(|| format!("`{}`: expected TYPE:COUNT (e.g. csa:21)", crate::input::echo(s.trim())))?;
        let count: u32 = count_text.trim().parse().ok().and_then(layer_count).ok_or_else(|| {
            format!("`{}`: the layer count must be an integer in 1..={MAX_STACK_LAYERS}", crate::input::echo(s.trim()))
        })?;
        let mut e = StackEntry { kind, count, ..StackEntry::default() };
        for item in parts {
            let (key, value) = item.split_once('=').ok_or_else(|| {
                format!("`{}`: an override is FIELD=VALUE (e.g. window=64)", crate::input::echo(item.trim()))
            })?;
            let v: u64 = value.trim().parse().map_err(|_| {
                format!("`{}`: {} must be a non-negative integer", crate::input::echo(item.trim()), key.trim())
            })?;
            e.set(key, v)?;
        }
        Ok(e)
    }
}

/// The model's layers by type and count (empty: the scenario's `layers` identical selecting
/// layers, as before stacks existed).
///
/// ```
/// use dsa_sim::scenario::Stack;
///
/// let flash: Stack = "csa:21,hca:20,swa:2".parse().unwrap();
/// assert_eq!(flash.selecting_layers(), Some(21));
/// assert_eq!(flash.to_string(), "csa:21,hca:20,swa:2");
/// assert!("csa:21:index_topk=1024".parse::<Stack>().is_err()); // a csa layer's k is the scenario's
/// assert!("none".parse::<Stack>().unwrap().is_empty());
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Stack {
    len: u8,
    entries: [StackEntry; MAX_STACK_ENTRIES],
}

impl Stack {
    /// Builds a stack from entries (at most [`MAX_STACK_ENTRIES`], at least one selecting).
    pub(crate) fn new(entries: &[StackEntry]) -> Result<Stack, String> {
        if entries.len() > MAX_STACK_ENTRIES {
            return Err(format!("{} entries: a stack has at most {MAX_STACK_ENTRIES}", entries.len()));
        }
        let mut s = Stack::default();
        for e in entries {
            if layer_count(e.count as u64).is_none() {
                return Err(format!("{e}: the layer count must be in 1..={MAX_STACK_LAYERS}"));
            }
            s.entries[s.len as usize] = *e;
            s.len += 1;
        }
        if !entries.is_empty() && !entries.iter().any(|e| e.kind.selects()) {
            return Err(
                "a stack needs at least one selecting layer (csa or dsa): without one nothing selects the needle"
                    .to_string(),
            );
        }
        Ok(s)
    }

    /// The entries, in the order given.
    pub(crate) fn entries(&self) -> &[StackEntry] {
        &self.entries[..self.len as usize]
    }

    /// Whether the stack is empty (the scenario's `layers` describe the model).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Selecting layers (csa + dsa), or `None` for an empty stack.
    pub fn selecting_layers(&self) -> Option<u32> {
        (!self.is_empty()).then(|| self.entries().iter().filter(|e| e.kind.selects()).map(|e| e.count).sum())
    }

    /// Every layer the stack counts.
    pub fn total_layers(&self) -> u32 {
        self.entries().iter().map(|e| e.count).sum()
    }

    /// The same stack with its selecting layers set to `n` (one selecting entry; with several,
    /// they are merged into the first). For captured selections, whose layers are the model's
    /// selecting layers.
    pub(crate) fn with_selecting_layers(&self, n: u32) -> Stack {
        let mut out = Stack::default();
        let mut placed = false;
        for e in self.entries() {
            if e.kind.selects() {
                if !placed {
                    out.entries[out.len as usize] = StackEntry { count: n, ..*e };
                    out.len += 1;
                    placed = true;
                }
            } else {
                out.entries[out.len as usize] = *e;
                out.len += 1;
            }
        }
        out
    }

    /// The types of the selecting entries, when they differ (csa and dsa in one stack).
    pub(crate) fn mixed_selecting_kinds(&self) -> bool {
        let mut kinds = self.entries().iter().filter(|e| e.kind.selects()).map(|e| e.kind);
        let first = kinds.next();
        kinds.any(|k| Some(k) != first)
    }
}

/// The text form: entries joined by `,` (`csa:21,hca:20,swa:2`); empty: `none`.
impl fmt::Display for Stack {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.is_empty() {
            return f.write_str("none");
        }
        for (i, e) in self.entries().iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{e}")?;
        }
        Ok(())
    }
}

/// Entries separated by `,` or `+` (`+` inside a sweep axis, whose values are separated by
/// commas: `stack=csa:1,csa:21+hca:20+swa:2`); `none` or nothing: the empty stack.
impl FromStr for Stack {
    type Err = String;
    fn from_str(s: &str) -> Result<Stack, String> {
        let t = s.trim();
        if t.is_empty() || t.eq_ignore_ascii_case("none") {
            return Ok(Stack::default());
        }
        let entries: Vec<StackEntry> = t.split([',', '+']).map(str::trim).map(str::parse).collect::<Result<_, _>>()?;
        Stack::new(&entries)
    }
}

/// One entry as TOML and JSON write it: `{ type = "hca", count = 20, window = 64 }`.
#[derive(Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
struct EntryDoc {
    #[serde(rename = "type")]
    kind: String,
    count: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    compress_ratio: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    window: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    sink: Option<u64>,
}

impl Serialize for Stack {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let docs: Vec<EntryDoc> = self
            .entries()
            .iter()
            .map(|e| EntryDoc {
                kind: e.kind.name().to_string(),
                count: e.count as u64,
                compress_ratio: e.compress_ratio,
                window: e.window,
                sink: e.sink,
            })
            .collect();
        docs.serialize(s)
    }
}

impl<'de> Deserialize<'de> for Stack {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Stack, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Doc {
            Text(String),
            Entries(Vec<EntryDoc>),
        }
        match Doc::deserialize(d)? {
            Doc::Text(t) => t.parse().map_err(serde::de::Error::custom),
            Doc::Entries(docs) => Stack::from_docs(&docs).map_err(serde::de::Error::custom),
        }
    }
}

impl Stack {
    fn from_docs(docs: &[EntryDoc]) -> Result<Stack, String> {
        let mut entries = Vec::with_capacity(docs.len());
        for d in docs {
            let count = layer_count(d.count).ok_or_else(|| {
                format!(
                    "{}: the layer count must be in 1..={MAX_STACK_LAYERS}, not {}",
                    crate::input::echo(&d.kind),
                    d.count
                )
            })?;
            let mut e = StackEntry { kind: d.kind.parse()?, count, ..StackEntry::default() };
            for (key, v) in [("compress_ratio", d.compress_ratio), ("window", d.window), ("sink", d.sink)] {
                if let Some(v) = v {
                    e.set(key, v)?;
                }
            }
            entries.push(e);
        }
        Stack::new(&entries)
    }

    /// The stack from a TOML array of tables (`stack = [{ type = "csa", count = 21 }, …]`).
    pub(crate) fn from_toml_array(items: &[toml::Value]) -> Result<Stack, String> {
        let docs: Vec<EntryDoc> = items
            .iter()
            .map(|v| {
                v.clone().try_into::<EntryDoc>().map_err(|e| crate::input::cap_line(e.message().trim()).into_owned())
            })
            .collect::<Result<_, _>>()?;
        Stack::from_docs(&docs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn text_round_trips_and_overrides_are_checked() {
        for text in [
            "csa:21,hca:20,swa:2",
            "dsa:61",
            "dense:2,csa:30",
            "csa:30,hca:31:window=64,swa:1:window=128:sink=4",
            "none",
        ] {
            let s: Stack = text.parse().unwrap();
            assert_eq!(s.to_string(), text);
            assert_eq!(s.to_string().parse::<Stack>().unwrap(), s);
        }
        let s: Stack = "csa:21+hca:20+swa:2".parse().unwrap();
        assert_eq!(s.to_string(), "csa:21,hca:20,swa:2");
        assert_eq!(s.selecting_layers(), Some(21));
        assert_eq!(s.total_layers(), 43);
        assert_eq!(s.entries()[1].hca_ratio(), Some(128));
        assert_eq!("hca:1:compress_ratio=64,csa:1".parse::<Stack>().unwrap().entries()[0].hca_ratio(), Some(64));
        for (bad, why) in [
            ("csa:0", "1..=4096"),
            ("csa", "TYPE:COUNT"),
            ("mla:3", "unknown layer type"),
            ("hca:20", "at least one selecting"),
            ("csa:2:index_topk=1024", "scenario's own fields"),
            ("swa:2:compress_ratio=4,csa:1", "may set window, sink"),
            ("csa:1,swa:1:window=x", "non-negative integer"),
            ("csa:1,swa:1:window", "FIELD=VALUE"),
            ("csa:1,csa:1,csa:1,csa:1,csa:1,csa:1,csa:1,csa:1,csa:1", "at most 8"),
        ] {
            let e = bad.parse::<Stack>().unwrap_err();
            assert!(e.contains(why), "{bad}: {e}");
        }
    }

    #[test]
    fn documents_round_trip() {
        let s: Stack = "csa:21,hca:20:window=64,swa:2".parse().unwrap();
        let json = serde_json::to_string(&s).unwrap();
        assert_eq!(
            json,
            r#"[{"type":"csa","count":21},{"type":"hca","count":20,"window":64},{"type":"swa","count":2}]"#
        );
        assert_eq!(serde_json::from_str::<Stack>(&json).unwrap(), s);
        assert_eq!(serde_json::from_str::<Stack>("\"csa:21,hca:20:window=64,swa:2\"").unwrap(), s);
        let t: toml::Table = toml::from_str("stack = [{ type = \"csa\", count = 21 }, { type = \"hca\", count = 20, window = 64 }, { type = \"swa\", count = 2 }]").unwrap();
        let arr = t["stack"].as_array().unwrap();
        assert_eq!(Stack::from_toml_array(arr).unwrap(), s);
        let bad: toml::Table = toml::from_str("stack = [{ type = \"csa\", count = 21, k = 3 }]").unwrap();
        assert!(Stack::from_toml_array(bad["stack"].as_array().unwrap()).unwrap_err().contains("unknown field"));
        assert_eq!(serde_json::to_string(&Stack::default()).unwrap(), "[]");
    }

    #[test]
    fn selecting_layers_are_replaced_for_captures() {
        let s: Stack = "csa:21,hca:20,swa:2".parse().unwrap();
        assert_eq!(s.with_selecting_layers(5).to_string(), "csa:5,hca:20,swa:2");
        assert!(!s.mixed_selecting_kinds());
        assert!("csa:1,dsa:2".parse::<Stack>().unwrap().mixed_selecting_kinds());
    }
}
