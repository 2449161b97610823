//! Throughput of `import topk` on an SGLang reply: the streaming JSON scan, chunked base64
//! decoding and row checks over one generated reply of ~330 MB (DeepSeek-V3.2's shape, 61
//! indexer layers × index_topk 2048, 480 rows of int32), written to a temporary folder by the
//! bench itself. Criterion reports the time per import and the throughput in bytes of JSON per
//! second (the target: ≥ 200 MB/s, in bounded memory).
//!
//!   cargo bench --bench import_topk

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::io::Write;

const LAYERS: usize = 61;
const K: usize = 2048;
const ROWS: usize = 480;

fn b64(bytes: &[u8]) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

fn bench(c: &mut Criterion) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("reply.json");
    // Indices from a cheap generator (xorshift) within 0..32768 entries; three rows at a time
    // are a multiple of 3 bytes, so the base64 of the chunks concatenates into the whole's.
    let mut x: u32 = 0x9e37_79b9;
    let mut chunk = Vec::with_capacity(3 * LAYERS * K * 4);
    for _ in 0..3 * LAYERS * K {
        x ^= x << 13;
        x ^= x >> 17;
        x ^= x << 5;
        chunk.extend_from_slice(&((x % 32768) as i32).to_le_bytes());
    }
    let text = b64(&chunk);
    let mut f = std::io::BufWriter::new(std::fs::File::create(&path).unwrap());
    f.write_all(b"{\"text\":\" The answer is 42.\",\"meta_info\":{\"id\":\"bench\",\"prompt_tokens\":131073,\"indexer_topk\":\"").unwrap();
    for _ in 0..ROWS / 3 {
        f.write_all(text.as_bytes()).unwrap();
    }
    f.write_all(b"\",\"e2e_latency\":1.0}}\n").unwrap();
    f.into_inner().unwrap().sync_all().unwrap();
    let size = std::fs::metadata(&path).unwrap().len();
    let manifest = dir.path().join("manifest.csv");
    std::fs::write(&manifest, "file,row,context_len,needle_start,needle_tokens\nreply.json,0,131072,4096,16\nreply.json,240,131072,65536,16\nreply.json,479,131072,120000,16\n").unwrap();
    let options = dsa_sim::import::topk::Options {
        layers: LAYERS as u64,
        index_topk: K as u64,
        compress_ratio: 4,
        overlap: true,
    };
    let mut g = c.benchmark_group("import_topk");
    g.throughput(Throughput::Bytes(size));
    g.sample_size(10);
    g.bench_function(format!("sglang_reply_{}MB", size / 1_000_000), |b| {
        b.iter(|| {
            let imp = dsa_sim::import::topk::import(&manifest, &options).unwrap();
            assert_eq!(imp.selections.len(), 3);
            imp
        })
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
