//! The pieces of `estimate`'s output that the engine's results give.

use crate::engine::RankQuantiles;

impl RankQuantiles {
    /// A JSON object keyed by level ("0.05", "0.5", …); `null` where never reached.
    pub fn to_json(&self) -> serde_json::Value {
        let map: serde_json::Map<String, serde_json::Value> =
            self.pairs().iter().map(|(p, v)| (format!("{p}"), serde_json::json!(v))).collect();
        serde_json::Value::Object(map)
    }
}
