//! Every text element of every shipped figure (results/*/figures/*.svg) lies inside its canvas,
//! and so does every text element of a figure drawn here with a subtitle and a footer note far
//! longer than the canvas is wide (they wrap instead of running off both edges).
//!
//! A text's width is measured with the embedded font's own advance widths (DejaVu Sans, read
//! with ttf-parser from assets/fonts: independent of plotters' layout), at the SVG's font size;
//! its height is the font size, placed by the SVG's `dy` (0.76em: the top at y; 0.5ex: centred
//! on y; −0.5ex: the bottom at y). Rotated labels (the y-axis title, vertical marker labels) are
//! measured along their rotation.

use std::path::{Path, PathBuf};

const FONT: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/fonts/DejaVuSans.ttf");

struct Metrics {
    data: Vec<u8>,
}

impl Metrics {
    fn load() -> Metrics {
        Metrics { data: std::fs::read(FONT).unwrap() }
    }
    /// The advance width of `text` at `size` px (kerning ignored: it only narrows text).
    fn width(&self, text: &str, size: f64) -> f64 {
        let face = ttf_parser::Face::parse(&self.data, 0).unwrap();
        let upem = face.units_per_em() as f64;
        let fallback = face.glyph_index('?').and_then(|g| face.glyph_hor_advance(g)).unwrap();
        let units: f64 = text
            .chars()
            .map(|c| face.glyph_index(c).and_then(|g| face.glyph_hor_advance(g)).unwrap_or(fallback) as f64)
            .sum();
        units / upem * size
    }
}

/// (x0, y0, x1, y1) of one `<text>` element.
fn text_box(m: &Metrics, n: roxmltree::Node) -> (f64, f64, f64, f64) {
    let num = |k: &str| n.attribute(k).unwrap_or_else(|| panic!("<text> without {k}")).parse::<f64>().unwrap();
    let (x, y, size) = (num("x"), num("y"), num("font-size"));
    let text: String = n.descendants().filter(|d| d.is_text()).map(|d| d.text().unwrap()).collect::<String>();
    let text = text.trim();
    let w = m.width(text, size);
    // Along the text direction: where it starts relative to the anchor.
    let (a0, a1) = match n.attribute("text-anchor").unwrap_or("start") {
        "middle" => (-w / 2.0, w / 2.0),
        "end" => (-w, 0.0),
        _ => (0.0, w),
    };
    // Across it: the em box placed by dy.
    let (b0, b1) = match n.attribute("dy").unwrap_or("0") {
        "0.76em" => (0.0, size),
        "0.5ex" => (-size / 2.0, size / 2.0),
        "-0.5ex" => (-size, 0.0),
        dy => panic!("unexpected dy {dy}"),
    };
    let rot = n.attribute("transform").map(|t| {
        let inner =
            t.strip_prefix("rotate(").and_then(|t| t.strip_suffix(')')).unwrap_or_else(|| panic!("transform {t}"));
        inner.split(',').next().unwrap().trim().parse::<f64>().unwrap()
    });
    match rot.map(|r| r.rem_euclid(360.0) as i64) {
        None | Some(0) => (x + a0, y + b0, x + a1, y + b1),
        // rotate(90) about (x, y): the text runs down, its "up" points to +x.
        Some(90) => (x - b1, y + a0, x - b0, y + a1),
        // rotate(270): the text runs up.
        Some(270) => (x + b0, y - a1, x + b1, y - a0),
        Some(r) => panic!("rotation {r}"),
    }
}

/// Every text element of `svg` inside the canvas; returns how many were checked.
fn check_svg(m: &Metrics, path: &Path) -> usize {
    let src = std::fs::read_to_string(path).unwrap();
    let doc = roxmltree::Document::parse(&src).unwrap();
    let root = doc.root_element();
    let (w, h): (f64, f64) =
        (root.attribute("width").unwrap().parse().unwrap(), root.attribute("height").unwrap().parse().unwrap());
    let mut n = 0;
    let mut bad = vec![];
    for t in root.descendants().filter(|d| d.has_tag_name("text")) {
        let (x0, y0, x1, y1) = text_box(m, t);
        if x0 < 0.0 || y0 < 0.0 || x1 > w || y1 > h {
            let s: String = t.descendants().filter(|d| d.is_text()).map(|d| d.text().unwrap()).collect();
            bad.push(format!("[{x0:.0}, {x1:.0}] x [{y0:.0}, {y1:.0}] outside {w} x {h}: {:?}", s.trim()));
        }
        n += 1;
    }
    assert!(bad.is_empty(), "{}:\n  {}", path.display(), bad.join("\n  "));
    n
}

#[test]
fn the_font_metrics_are_the_fonts() {
    // DejaVu Sans: 2048 units per em, 'M' 1767 wide, a space 651 (the font's hmtx).
    let m = Metrics::load();
    assert!((m.width("M", 2048.0) - 1767.0).abs() < 1e-9);
    assert!((m.width(" ", 2048.0) - 651.0).abs() < 1e-9);
    assert!((m.width("MM", 10.0) - 2.0 * m.width("M", 10.0)).abs() < 1e-12);
}

#[test]
fn every_shipped_figure_keeps_its_text_inside_the_canvas() {
    let m = Metrics::load();
    let results = Path::new(env!("CARGO_MANIFEST_DIR")).join("results");
    let mut svgs: Vec<PathBuf> = vec![];
    for r in std::fs::read_dir(&results).unwrap() {
        let figures = r.unwrap().path().join("figures");
        if figures.is_dir() {
            for f in std::fs::read_dir(&figures).unwrap() {
                let p = f.unwrap().path();
                if p.extension().is_some_and(|e| e == "svg") {
                    svgs.push(p);
                }
            }
        }
    }
    svgs.sort();
    assert!(svgs.len() >= 20, "{} shipped figures", svgs.len());
    // Every figure checked before the first failure is reported, so that one run names them all.
    let results: Vec<std::thread::Result<usize>> =
        svgs.iter().map(|p| std::panic::catch_unwind(|| check_svg(&m, p))).collect();
    let failed: Vec<String> =
        svgs.iter().zip(&results).filter(|(_, r)| r.is_err()).map(|(p, _)| p.display().to_string()).collect();
    assert!(failed.is_empty(), "text outside the canvas in {} figure(s):\n  {}", failed.len(), failed.join("\n  "));
    let texts: usize = results.into_iter().map(|r| r.unwrap()).sum();
    assert!(texts > 20 * svgs.len(), "{texts} text elements");
}

#[test]
fn long_subtitles_and_notes_wrap_inside_the_canvas() {
    // A figure experiment whose subtitle (the scenario's non-default fields) and footer note
    // (the overlay's provenance and data file name) are each wider than the canvas.
    let d = tempfile::tempdir().unwrap();
    let name = "a-measured-table-with-a-rather-long-name-that-goes-on-and-on-and-on-for-the-footer.csv";
    std::fs::write(d.path().join(name), "context_len,index_topk,trials,hits\n4096,512,100,80\n16384,512,100,40\n")
        .unwrap();
    std::fs::write(
        d.path().join("x.toml"),
        format!(
            "name = \"x\"\ntitle = \"t\"\nseed = 1\ntrials = 100\nengine = \"analytic\"\n\n[scenario]\npreset = \"deepseek-v4-flash-sglang\"\nstack = \"none\"\ndprime = 2.25\nneedle_sd = 1.25\nhard_negatives = 3\nhard_mean = 1.5\nrepeat = 2\nrepeat_layout = \"adjacent\"\np_read = 0.95\np_guess = 0.01\nsink = 4\n\n[[data]]\nname = \"m\"\nfile = \"{name}\"\nlabel = \"a measured table\"\n\n[[figure]]\nname = \"f\"\nkind = \"recall_curves\"\ntitle = \"Recall vs context\"\nx = \"context_len=1024..65536:x4\"\nseries = [\"index_topk=512,1024\"]\ndata = \"m\"\nlog_x = true\n"
        ),
    )
    .unwrap();
    let out = d.path().join("out");
    let o = std::process::Command::new(env!("CARGO_BIN_EXE_dsa-sim"))
        .args(["run", d.path().join("x.toml").to_str().unwrap(), "--out", out.to_str().unwrap(), "--quiet"])
        .output()
        .unwrap();
    assert!(o.status.success(), "{}", String::from_utf8_lossy(&o.stderr));
    let svg = out.join("figures/f.svg");
    let m = Metrics::load();
    check_svg(&m, &svg);
    // The long texts are there, in more than one line each: nothing was dropped.
    let src = std::fs::read_to_string(&svg).unwrap();
    let doc = roxmltree::Document::parse(&src).unwrap();
    let texts: Vec<String> = doc
        .descendants()
        .filter(|d| d.has_tag_name("text"))
        .map(|t| {
            t.descendants().filter(|d| d.is_text()).map(|d| d.text().unwrap()).collect::<String>().trim().to_string()
        })
        .collect();
    let joined = texts.join(" ");
    for needle in ["repeat_layout = adjacent", "p_guess = 0.01", "bars: Wilson 95% intervals.", name] {
        assert!(joined.contains(needle), "{needle:?} not in {texts:?}");
    }
    let subtitle_lines = texts.iter().filter(|t| t.contains(" = ") && t.contains(", ")).count();
    assert!(subtitle_lines >= 2, "{texts:?}");
}
