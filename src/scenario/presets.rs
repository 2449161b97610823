//! The named presets (docs/model.md#presets) and the indexer number formats they carry.

use super::{Pooling, Scenario, ScenarioError};
use crate::formats::Format;

/// The names of the built-in presets.
pub const PRESET_NAMES: &[&str] = &[
    "deepseek-v3.2",
    "deepseek-v4-flash",
    "deepseek-v4-pro",
    "deepseek-v4-flash-fp8cache",
    "deepseek-v4-pro-fp8cache",
    "quest-16",
    "nsa",
];

impl Scenario {
    /// A named preset (docs/model.md#presets), as far as the scalar model expresses it.
    ///
    /// Sources: DeepSeek-V3.2-Exp `inference/config` (index_topk 2048, token-level), DeepSeek-V4
    /// reference `model.py` (CSA compress_ratio 4 with overlapping blocks, index_topk 512 Flash /
    /// 1024 Pro, sliding window 128, top-k kernel maximum 1024 / 2048), Quest (page 16, max-bound
    /// page scores), NSA (selection blocks 64, 16 selected, window 512, 1 initial block forced).
    pub fn preset(name: &str) -> Result<Scenario, ScenarioError> {
        let base = Scenario::default();
        let s = match name.trim() {
            "deepseek-v3.2" => Scenario {
                compress_ratio: 1,
                overlap: false,
                index_topk: 2048,
                max_topk: 2048,
                window: 0,
                q_format: fp8_indexer(),
                k_format: fp8_indexer(),
                ..base
            },
            "deepseek-v4-flash" => Scenario {
                compress_ratio: 4,
                overlap: true,
                index_topk: 512,
                max_topk: 1024,
                window: 128,
                q_format: fp4_indexer(),
                k_format: fp4_indexer(),
                ..base
            },
            "deepseek-v4-pro" => Scenario {
                compress_ratio: 4,
                overlap: true,
                index_topk: 1024,
                max_topk: 2048,
                window: 128,
                q_format: fp4_indexer(),
                k_format: fp4_indexer(),
                ..base
            },
            "deepseek-v4-flash-fp8cache" => Scenario {
                k_format: fp8_indexer(),
                ..Scenario::preset("deepseek-v4-flash")?
            },
            "deepseek-v4-pro-fp8cache" => Scenario {
                k_format: fp8_indexer(),
                ..Scenario::preset("deepseek-v4-pro")?
            },
            "quest-16" => Scenario {
                compress_ratio: 16,
                overlap: false,
                index_topk: 64,
                max_topk: 256,
                window: 0,
                pooling: Pooling::Max,
                ..base
            },
            "nsa" => Scenario {
                compress_ratio: 64,
                overlap: false,
                index_topk: 16,
                max_topk: 64,
                window: 512,
                sink: 64,
                ..base
            },
            other => return Err(ScenarioError::UnknownPreset(other.to_string())),
        };
        Ok(s)
    }

}

/// DeepSeek's FP8 indexer format: e4m3, blocks of 128, fp32 scale amax / 448 (amax floored at
/// 1e-4), as docs/model.md#presets lists for V3.2 and as serving stacks store V4's indexer cache.
/// (DeepSeek-V3.2-Exp's released config sets `scale_fmt = "ue8m0"`, i.e. power-of-two scales:
/// `--q-format fp8-e4m3:128:ue8m0:floor=0.0001` selects that variant.)
pub fn fp8_indexer() -> Format {
    Format::Block(crate::formats::BlockScaled::deepseek_fp8(crate::formats::ScaleKind::Fp32))
}

/// DeepSeek-V4's FP4 indexer format: e2m1, blocks of 32, power-of-two (ue8m0) scale
/// 2^ceil(log2(amax / 6)), as `fp4_act_quant` in V4's reference kernel.
pub fn fp4_indexer() -> Format {
    Format::Block(crate::formats::BlockScaled::deepseek_fp4())
}
