//! The named presets (docs/presets.md): each field a preset sets, with the public source it comes
//! from. `dsa-sim presets --json` prints the same table.
//!
//! A preset is its parent's values (or the defaults) plus its own rows, each applied through
//! [`Scenario::set_text`] as a flag would be, so a preset cannot hold a value a user could not
//! type. Sources are cited as `FILE:LINE @commit` of the repositories named in
//! [`SOURCES`]; a value that no reference code fixes says so.

use super::{Field, Scenario, ScenarioError};
#[cfg(test)]
use crate::formats::Format;

/// One value of a preset and where it comes from.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct PresetValue {
    /// The field.
    pub(crate) field: Field,
    /// Its value, as a flag takes it.
    pub(crate) value: &'static str,
    /// The file and line it comes from (or why it is not sourced).
    pub(crate) source: &'static str,
}

/// A named preset.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Preset {
    /// The name `--preset` takes.
    pub name: &'static str,
    /// What it models, in one line.
    pub summary: &'static str,
    /// The preset it starts from (`None`: the defaults).
    pub parent: Option<&'static str>,
    /// Its own values, applied in order after the parent's.
    pub values: &'static [PresetValue],
}

const fn v(field: Field, value: &'static str, source: &'static str) -> PresetValue {
    PresetValue { field, value, source }
}

/// The repositories the sources name, as read in December 2026.
pub(crate) const SOURCES: &[(&str, &str)] = &[
    ("V4-Flash", "DeepSeek-V4-Flash inference/ (model.py, kernel.py, config.json) @0825add (the copy vendored in AI-Hypercomputer/maxtext tests/utils/deepseek4_reference/ names the same lines, e.g. \"upstream model.py:499\")"),
    ("V4-Pro", "DeepSeek-V4-Pro inference/ (model.py, config.json) @2074660"),
    ("V3.2", "deepseek-ai/DeepSeek-V3.2-Exp inference/ (model.py, kernel.py, config_671B_v3.2.json) @87e509a, the last upstream commit (after 8631a81 \"fix indexer rope\")"),
    ("sglang", "sgl-project/sglang: python/sglang/jit_kernel/dsv4/topk.py @05adf94, jit_kernel/csrc/deepseek_v4/topk_v2.cuh @003ceec, srt/mem_cache/deepseek_v4_memory_pool.py @007bddd, srt/layers/attention/deepseek_v4_backend.py"),
    ("vLLM", "vllm-project/vllm: vllm/model_executor/layers/deepseek_v4_attention.py @0a291a2 (DeepseekV4Indexer.__init__)"),
    ("aiter", "ROCm/aiter @e404860: csrc/kernels/topk_per_row_kernels.cu, op_tests/test_topk_per_row.py"),
    ("Quest", "mit-han-lab/Quest @01c1623: evaluation/quest_attention.py, kernels/include/decode/decode_attn.cuh, quest/models/llama.py"),
];

const FLASH: &[PresetValue] = &[
    v(Field::Stack, "csa:21,hca:20,swa:2", "V4-Flash config.json:34 compress_ratios: 4 at layers 2, 4, …, 42 (21 CSA, each with its own indexer: model.py:469 builds one only where c = 4), 128 at 3, 5, …, 41 (20 HCA: get_compress_topk_idxs, model.py:269, attends every compressed entry), 0 at 0, 1 (sliding window only) and 43 (the MTP layer, not on the answer's path)"),
    v(Field::CompressRatio, "4", "V4-Flash config.json:34 (compress_ratios, CSA layers)"),
    v(Field::Overlap, "true", "V4-Flash model.py:290 `self.overlap = compress_ratio == 4` (entry i pools blocks i − 1 and i)"),
    v(Field::IndexTopk, "512", "V4-Flash config.json:27 \"index_topk\": 512"),
    v(Field::MaxTopk, "2048", "not a model value: the reference selects with torch.topk (model.py:427), any k; 2048 is the largest k of any serving kernel (topk_kernel)"),
    v(Field::Window, "128", "V4-Flash config.json:19 \"window_size\": 128; the window includes the query token (get_window_topk_idxs, model.py:262–264)"),
    v(Field::Sink, "0", "V4-Flash model.py:456: attn_sink is a learned per-head softmax logit, not attended sink tokens"),
    v(Field::Heads, "64", "V4-Flash config.json:25 \"index_n_heads\": 64"),
    v(Field::HeadDim, "128", "V4-Flash config.json:26 \"index_head_dim\": 128"),
    v(Field::QFormat, "fp4-e2m1:32:ue8m0:floor=7.052966e-38", "V4-Flash model.py:414–416: Hadamard then fp4_act_quant(q, fp4_block_size = 32 (:18)); kernel.py:163–164 scale 2^ceil(log2(amax / 6)), amax floored at 6·2^-126"),
    v(Field::KFormat, "fp4-e2m1:32:ue8m0:floor=7.052966e-38", "V4-Flash model.py:368–370: the indexer's compressor (rotate = True, :398) Hadamard-rotates and fp4_act_quants each compressed key"),
    v(Field::Hadamard, "true", "V4-Flash model.py:247–251 rotate_activation: hadamard_transform(x, scale = d^-½), on q (:414) and keys (:369)"),
    v(Field::KeyNorm, "true", "V4-Flash model.py:362 kv = self.norm(kv): RMSNorm of the compressed key (:299)"),
    v(Field::Compressor, "gated", "V4-Flash model.py:324–342: per-channel softmax over the pooled positions of wgate(x) + ape"),
    v(Field::HeadWeights, "signed", "V4-Flash model.py:418 weights = weights_proj(x) · (softmax_scale · n_heads^-½): per query token, signed (the law of weights_proj(x) is a modelling choice; its positive scale changes no rank)"),
    v(Field::RopeDims, "64", "V4-Flash config.json:16 \"rope_head_dim\": 64; q: model.py:413 apply_rotary_emb(q[..., -rd:]) at the query's position; keys: :364–366 at each block's start position i·c"),
    v(Field::RopeAt, "last", "V4-Flash model.py:413 (the last rope_head_dim dims), interleaved pairs (view_as_complex of (…, 2) pairs, :232–235)"),
    v(Field::RopeTheta, "160000", "V4-Flash config.json:33 \"compress_rope_theta\": 160000 (layers with a compressor use it, model.py:475–476)"),
    v(Field::RopeFactor, "16", "V4-Flash config.json:22 \"rope_factor\": 16 (YaRN, precompute_freqs_cis model.py:200–229; beta_fast 32, beta_slow 1 at config.json:23–24)"),
    v(Field::RopeOrigLen, "65536", "V4-Flash config.json:20 \"original_seq_len\": 65536"),
];

const PRO: &[PresetValue] = &[
    v(Field::Stack, "csa:30,hca:31", "V4-Pro inference/config.json:34 compress_ratios: 4 at layers 2, 4, …, 60 (30 CSA), 128 at 0, 1, 3, 5, …, 59 (31 HCA), 0 only at 61 (the MTP layer): no sliding-window-only layer"),
    v(Field::IndexTopk, "1024", "V4-Pro inference/config.json:27 \"index_topk\": 1024"),
    v(Field::Window, "128", "V4-Pro inference/config.json:19 \"window_size\": 128"),
    v(Field::Heads, "64", "V4-Pro inference/config.json:25 \"index_n_heads\": 64"),
    v(Field::HeadDim, "128", "V4-Pro inference/config.json:26 \"index_head_dim\": 128"),
];

/// sglang's default V4 indexer: q and keys in fp8 e4m3 over the 128-dim head, fp32 scales.
const SGLANG_FP8: &[PresetValue] = &[
    v(Field::QFormat, "fp8-e4m3:128:fp32:floor=0.0001", "sglang jit_kernel/dsv4/elementwise.py fused_q_indexer_rope_hadamard_quant: q_fp8 e4m3 over the whole 128-dim head, its fp32 scale folded into the head weights (no line number: read through the index)"),
    v(Field::KFormat, "fp8-e4m3:128:fp32:floor=0.0001", "sglang srt/mem_cache/deepseek_v4_memory_pool.py:35–39 get_dsv4_indexer_bytes_per_token: index_head_dim + index_head_dim // 128 · 4 = 132 B (128 fp8 + one fp32 scale); FP4 only with --enable-deepseek-v4-fp4-indexer (default off)"),
    v(Field::TopkKernel, "sglang-v1", "sglang jit_kernel/dsv4/topk.py:21 `assert topk in (512, 1024)`; deepseek_v4_backend.py asserts index_topk in (512, 1024) whatever the kernel (topk_v2 needs that gate changed)"),
    v(Field::MaxTopk, "1024", "the sglang-v1 kernel's largest k (topk_kernel sets it)"),
];

/// vLLM's V4 indexer cache in FP8: the V3.2 layout, 128 fp8 + 4-byte scale, ue8m0 scales.
const VLLM_FP8: &[PresetValue] = &[
    v(Field::QFormat, "fp8-e4m3:128:ue8m0:floor=0.0001", "vLLM deepseek_v4_attention.py DeepseekV4Indexer: scale_fmt = \"ue8m0\", quant_block_size = 128; the q side is assumed to share the key's format (not read in the source)"),
    v(Field::KFormat, "fp8-e4m3:128:ue8m0:floor=0.0001", "vLLM deepseek_v4_attention.py DeepseekV4Indexer: \"FP8 indxer cache use the same layout as V3.2: head_dim bytes = 128 fp8 + 4 fp32 scale = 132\", scale_fmt = \"ue8m0\"; the default (use_fp4_indexer_cache = False)"),
];

/// vLLM's MXFP4 indexer cache (attention_config.use_fp4_indexer_cache).
const VLLM_MXFP4: &[PresetValue] = &[
    v(Field::QFormat, "mxfp4", "not sourced: the q format of vLLM's MXFP4 indexer path was not read; assumed MXFP4 as the cache"),
    v(Field::KFormat, "mxfp4", "vLLM deepseek_v4_attention.py: use_fp4_kv = attention_config.use_fp4_indexer_cache (\"MXFP4\" indexer cache); sparse-attn op: (T, head_dim // 2) packed mxfp4 + (T, head_dim // 32) ue8m0 scales"),
];

/// The presets, in the order `dsa-sim presets` lists them.
pub const PRESETS: &[Preset] = &[
    Preset { name: "deepseek-v4-flash", summary: "DeepSeek-V4-Flash as the reference code builds it: 21 CSA + 20 HCA + 2 SWA layers, FP4 indexer", parent: None, values: FLASH },
    Preset { name: "deepseek-v4-flash-sglang", summary: "V4-Flash served by sglang's default: fp8 e4m3 q and keys (fp32 scales), the v1 top-k kernel", parent: Some("deepseek-v4-flash"), values: SGLANG_FP8 },
    Preset { name: "deepseek-v4-flash-vllm-fp8", summary: "V4-Flash served by vLLM's default FP8 indexer cache (ue8m0 scales)", parent: Some("deepseek-v4-flash"), values: VLLM_FP8 },
    Preset { name: "deepseek-v4-flash-vllm-mxfp4", summary: "V4-Flash with vLLM's MXFP4 indexer cache", parent: Some("deepseek-v4-flash"), values: VLLM_MXFP4 },
    Preset { name: "deepseek-v4-pro", summary: "DeepSeek-V4-Pro as the reference code builds it: 30 CSA + 31 HCA layers, k 1024, FP4 indexer", parent: Some("deepseek-v4-flash"), values: PRO },
    Preset { name: "deepseek-v4-pro-sglang", summary: "V4-Pro served by sglang's default: fp8 e4m3 q and keys, the v1 top-k kernel", parent: Some("deepseek-v4-pro"), values: SGLANG_FP8 },
    Preset { name: "deepseek-v4-pro-vllm-fp8", summary: "V4-Pro served by vLLM's default FP8 indexer cache", parent: Some("deepseek-v4-pro"), values: VLLM_FP8 },
    Preset { name: "deepseek-v4-pro-vllm-mxfp4", summary: "V4-Pro with vLLM's MXFP4 indexer cache", parent: Some("deepseek-v4-pro"), values: VLLM_MXFP4 },
    Preset {
        name: "deepseek-v3.2",
        summary: "DeepSeek-V3.2-Exp: 61 layers, each with a token-level indexer, k 2048, fp8 with power-of-two scales",
        parent: None,
        values: &[
            v(Field::Stack, "dsa:61", "V3.2 config_671B_v3.2.json:6 \"n_layers\": 61; every layer's MLA has its own Indexer (model.py Block → MLA → Indexer)"),
            v(Field::CompressRatio, "1", "V3.2 model.py: the indexer scores every token (k_cache of max_seq_len rows, model.py:453)"),
            v(Field::IndexTopk, "2048", "V3.2 config_671B_v3.2.json:25 \"index_topk\": 2048; model.py:483 topk(min(index_topk, end_pos))"),
            v(Field::MaxTopk, "2048", "not a model value: the reference uses torch.topk; ROCm/ATOM's V3.2 path asserts top-k 2048 (atom/models/deepseek_v2.py:1683)"),
            v(Field::Heads, "64", "V3.2 config_671B_v3.2.json:23 \"index_n_heads\": 64"),
            v(Field::HeadDim, "128", "V3.2 config_671B_v3.2.json:24 \"index_head_dim\": 128"),
            v(Field::QFormat, "fp8-e4m3:128:ue8m0:floor=0.0001", "V3.2 model.py:474 act_quant(q, block_size = 128 (:15), scale_fmt) with config_671B_v3.2.json:22 \"scale_fmt\": \"ue8m0\" (kernel.py:71–74: power-of-two scale, amax floored at 1e-4)"),
            v(Field::KFormat, "fp8-e4m3:128:ue8m0:floor=0.0001", "V3.2 model.py:475 act_quant(k, block_size, scale_fmt); k_cache fp8 e4m3 with fp32 scale storage (:453–454)"),
            v(Field::Hadamard, "true", "V3.2 model.py:472–473 rotate_activation on q and k"),
            v(Field::KeyNorm, "true", "V3.2 model.py:447, 467 k_norm = LayerNorm(head_dim) on each token's key (dsa-sim's key_norm RMS-normalises: the same for zero-mean keys)"),
            v(Field::RopeAt, "first", "V3.2 model.py:462–464 q_pe, q_nope = split(q, [rope_head_dim, …]); \"rope in indexer is not interleaved\": apply_rotary_emb(q_pe, freqs_cis, False) (:405, 418–419 pairs the halves); keys alike (:468–470)"),
            v(Field::RopeDims, "64", "V3.2 config_671B_v3.2.json:19 \"qk_rope_head_dim\": 64 (model.py:442 the indexer's rope_head_dim)"),
            v(Field::RopeTheta, "10000", "V3.2 model.py:82 rope_theta = 10000.0 (the config does not set it)"),
            v(Field::RopeFactor, "40", "V3.2 model.py:83 rope_factor = 40 (YaRN; beta_fast 32, beta_slow 1 at :84–85)"),
            v(Field::RopeOrigLen, "4096", "V3.2 model.py:81 original_seq_len = 4096"),
        ],
    },
    Preset {
        name: "quest-16",
        summary: "Quest: pages of 16 tokens scored by their channel-wise bound, 64 pages (1024 tokens), at least 3, the first two layers dense",
        parent: None,
        values: &[
            v(Field::Stack, "dense:2,csa:30", "Quest evaluation/quest_attention.py:84–85 `if q_len > 1 or self.layer_id < 2: return self.flash_forward(`; layer ids count down from a hard-coded 32 (:243–259); quest/models/llama.py:538 _quest_skip_layer = 2"),
            v(Field::CompressRatio, "16", "Quest evaluation/passkey/passkey.py:265 --chunk_size default 16; scripts/example_textgen.py:26 page_size = 16"),
            v(Field::IndexTopk, "64", "a token budget of 1024 (passkey.py:264 --token_budget default 1024) over pages of 16: token_budget // chunk_size (quest_attention.py:56)"),
            v(Field::MinTopk, "3", "Quest evaluation/quest_attention.py:55–56 topk(k = min(max(3, token_budget // chunk_size), …)); the CUDA path instead always keeps the last page (quest/utils/controller.py:114–115)"),
            v(Field::MaxTopk, "4096", "not a kernel limit: the largest page count of the paper's passkey budgets (4096 tokens at 100K = 256 pages); Quest selects with torch.topk"),
            v(Field::Pooling, "max", "scalar model: the page score is an upper bound over its tokens (decode_attn.cuh:155 max(q·max_k, q·min_k)), modelled as the max of the token scores"),
            v(Field::Compressor, "quest", "vector model: the page key is the channel-wise max and min of its tokens' keys, scored Σ_j max(q_j·M_j, q_j·m_j) (decode_attn.cuh:155; quest_attention.py:146–184)"),
            v(Field::Hadamard, "false", "Quest scores pages with the attention's own q and keys: no rotation, no quantization (quest_attention.py:146–184)"),
            v(Field::KeyNorm, "false", "Quest's page bound takes the raw keys' max and min (quest_attention.py:166–172)"),
            v(Field::RopeDims, "0", "not modelled: Quest's cached keys are rotated before their max and min are taken; dsa-sim's Quest page keys are not rotated"),
        ],
    },
];

/// The names of the built-in presets.
pub const PRESET_NAMES: &[&str] = &[
    "deepseek-v4-flash",
    "deepseek-v4-flash-sglang",
    "deepseek-v4-flash-vllm-fp8",
    "deepseek-v4-flash-vllm-mxfp4",
    "deepseek-v4-pro",
    "deepseek-v4-pro-sglang",
    "deepseek-v4-pro-vllm-fp8",
    "deepseek-v4-pro-vllm-mxfp4",
    "deepseek-v3.2",
    "quest-16",
];

/// The preset named `name`.
pub(crate) fn find_preset(name: &str) -> Result<&'static Preset, ScenarioError> {
    PRESETS.iter().find(|p| p.name == name.trim()).ok_or_else(|| ScenarioError::UnknownPreset(name.to_string()))
}

/// Every value preset `name` sets, its parents' first, each with its source (a later row of the
/// same field replaces an earlier one).
pub(crate) fn preset_values(name: &str) -> Result<Vec<PresetValue>, ScenarioError> {
    let p = find_preset(name)?;
    let mut out = match p.parent {
        Some(parent) => preset_values(parent)?,
        None => Vec::new(),
    };
    for row in p.values {
        out.retain(|r| r.field != row.field);
        out.push(*row);
    }
    Ok(out)
}

impl Scenario {
    /// A named preset (docs/presets.md): the defaults with the preset's values.
    pub fn preset(name: &str) -> Result<Scenario, ScenarioError> {
        let mut s = Scenario::default();
        for row in preset_values(name)? {
            s.set_text(row.field, row.value)?;
        }
        s.validate()?;
        Ok(s)
    }
}

/// DeepSeek's FP8 indexer format: e4m3, blocks of 128, fp32 scale amax / 448 (amax floored at
/// 1e-4), sglang's default V4 indexer key cache.
#[cfg(test)]
pub(crate) fn fp8_indexer() -> Format {
    Format::Block(crate::formats::BlockScaled::deepseek_fp8(crate::formats::ScaleKind::Fp32))
}

/// DeepSeek-V4's FP4 indexer format: e2m1, blocks of 32, power-of-two (ue8m0) scale
/// 2^ceil(log2(amax / 6)), as `fp4_act_quant` in V4's reference kernel.
#[cfg(test)]
pub(crate) fn fp4_indexer() -> Format {
    Format::Block(crate::formats::BlockScaled::deepseek_fp4())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_preset_is_listed_builds_and_cites_each_value() {
        assert_eq!(PRESETS.iter().map(|p| p.name).collect::<Vec<_>>(), PRESET_NAMES);
        for name in PRESET_NAMES {
            let s = Scenario::preset(name).unwrap();
            for row in preset_values(name).unwrap() {
                assert!(row.source.len() > 20, "{name} {}: a source", row.field);
                // The value shown is the value set.
                let mut t = Scenario::default();
                t.set_text(row.field, row.value).unwrap();
                assert_eq!(s.get(row.field), t.get(row.field), "{name} {}", row.field);
            }
        }
        let flash = Scenario::preset("deepseek-v4-flash").unwrap();
        assert_eq!(flash.q_format, fp4_indexer());
        assert_eq!(flash.selecting_layers(), 21);
        assert_eq!(Scenario::preset("deepseek-v4-pro").unwrap().selecting_layers(), 30);
        let sg = Scenario::preset("deepseek-v4-flash-sglang").unwrap();
        assert_eq!((sg.q_format, sg.k_format, sg.max_topk), (fp8_indexer(), fp8_indexer(), 1024));
        assert_eq!(Scenario::preset("deepseek-v3.2").unwrap().selecting_layers(), 61);
        assert!(Scenario::preset("nsa").is_err());
    }
}
