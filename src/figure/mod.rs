//! Figures: line charts and heatmaps (plotters, SVG and PNG) with measured-data overlays, for
//! the experiments' result folders.
//!
//! Text is drawn with the DejaVu Sans font embedded in the binary (`assets/fonts`, Bitstream
//! Vera licence), so figures render the same on machines without system fonts.

pub(crate) mod heatmap;
pub(crate) mod plot;

pub(crate) use heatmap::{CellColors, Heatmap, Panel};
pub(crate) use plot::{Corner, LineChart, PointSet, RefLine, Series};

use plotters::coord::Shift;
use plotters::prelude::*;
use std::path::{Path, PathBuf};

/// The font family every figure uses (registered from the embedded font).
pub(crate) const FONT: &str = "sans-serif";

static FONT_BYTES: &[u8] = include_bytes!("../../assets/fonts/DejaVuSans.ttf");

fn ensure_fonts() -> Result<(), FigureError> {
    static DONE: std::sync::OnceLock<Result<(), FigureError>> = std::sync::OnceLock::new();
    DONE.get_or_init(|| {
        for style in [FontStyle::Normal, FontStyle::Bold, FontStyle::Italic, FontStyle::Oblique] {
            plotters::style::register_font(FONT, style, FONT_BYTES)
                .map_err(|_| FigureError("the embedded font is invalid".into()))?;
        }
        Ok(())
    })
    .clone()
}

/// Something drawable on any plotters backend.
pub(crate) trait Figure {
    /// Draws the whole figure on `root`.
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), FigureError>;
}

/// A figure that could not be drawn or written (a failure, never bad input: the folder it goes
/// to has been checked before).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub(crate) struct FigureError(pub(crate) String);

impl crate::error::Classify for FigureError {
    fn kind(&self) -> crate::error::ErrorKind {
        crate::error::ErrorKind::Failure
    }
}

/// Draws `fig` to `DIR/STEM.svg` and `DIR/STEM.png` (each written under a temporary name, then
/// renamed) and returns the two paths.
pub(crate) fn save_figure(
    fig: &impl Figure,
    dir: &Path,
    stem: &str,
    size: (u32, u32),
) -> Result<Vec<PathBuf>, FigureError> {
    ensure_fonts()?;
    let fail = |e: &dyn std::fmt::Display| FigureError(e.to_string());
    let svg_path = dir.join(format!("{stem}.svg"));
    let mut svg = String::new();
    {
        let root = SVGBackend::with_string(&mut svg, size).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(|e| fail(&e))?;
    }
    // The one place SVG text is made XML-safe: every title, label, legend entry and note.
    let svg = crate::output::escape::svg_document(&svg);
    crate::sweep::write_atomic(&svg_path, svg.as_bytes()).map_err(|e| fail(&e))?;
    let png_path = dir.join(format!("{stem}.png"));
    let tmp = dir.join(format!(".{stem}.tmp-{}.png", std::process::id()));
    let drawn = (|| {
        let root = BitMapBackend::new(&tmp, size).into_drawing_area();
        fig.draw(&root)?;
        root.present().map_err(|e| fail(&e))
    })();
    if let Err(e) = drawn.and_then(|_| std::fs::rename(&tmp, &png_path).map_err(|e| fail(&e))) {
        let _ = std::fs::remove_file(&tmp);
        return Err(FigureError(format!("cannot write {}: {e}", png_path.display())));
    }
    Ok(vec![svg_path, png_path])
}

/// A frame's plotting area and its footer note's area (when there is a note).
pub(crate) type FramedAreas<DB> = (DrawingArea<DB, Shift>, Option<DrawingArea<DB, Shift>>);

/// Pixels kept free at each side of a line of subtitle or footer text.
pub(crate) const TEXT_MARGIN: u32 = 14;

/// The footer note's font size and line height.
const NOTE_SIZE: u32 = 15;
const NOTE_LINE: u32 = 19;

/// `text` broken into lines no wider than `max` pixels in `style`, as the embedded font lays
/// it out (plotters' estimate, the same on every backend): greedily at spaces, and inside a
/// word only when the word alone is wider than a line. Never drops a character but the
/// spaces it breaks at.
pub(crate) fn wrap_text<DB: DrawingBackend>(
    area: &DrawingArea<DB, Shift>,
    text: &str,
    style: &TextStyle,
    max: u32,
) -> Vec<String> {
    let width = |t: &str| area.estimate_text_size(t, style).map(|(w, _)| w).unwrap_or(u32::MAX);
    let mut lines: Vec<String> = Vec::new();
    let mut line = String::new();
    for word in text.split(' ').filter(|w| !w.is_empty()) {
        let candidate = if line.is_empty() { word.to_string() } else { format!("{line} {word}") };
        if width(&candidate) <= max {
            line = candidate;
            continue;
        }
        if !line.is_empty() {
            lines.push(std::mem::take(&mut line));
        }
        // The word starts a line; split it where it alone is too wide.
        for c in word.chars() {
            let mut next = line.clone();
            next.push(c);
            if !line.is_empty() && width(&next) > max {
                lines.push(std::mem::replace(&mut line, c.to_string()));
            } else {
                line = next;
            }
        }
    }
    if !line.is_empty() || lines.is_empty() {
        lines.push(line);
    }
    lines
}

fn note_style() -> TextStyle<'static> {
    (FONT, NOTE_SIZE).into_font().color(&RGBColor(90, 40, 40))
}

fn note_lines<DB: DrawingBackend>(area: &DrawingArea<DB, Shift>, note: &str) -> Vec<String> {
    let (w, _) = area.dim_in_pixel();
    wrap_text(area, note, &note_style(), w.saturating_sub(2 * TEXT_MARGIN))
}

/// The common frame of every figure: a white background, a titled body and, when `note` is not
/// empty, a footer strip below it for [`draw_note`] (30 pixels, and 19 more for each further
/// line the note wraps to).
pub(crate) fn frame<DB: DrawingBackend>(
    root: &DrawingArea<DB, Shift>,
    title: &str,
    note: &str,
) -> Result<FramedAreas<DB>, FigureError> {
    let e = |e: DrawingAreaErrorKind<DB::ErrorType>| FigureError(e.to_string());
    root.fill(&WHITE).map_err(e)?;
    let (_, h) = root.dim_in_pixel();
    let (body, foot) = if note.is_empty() {
        (root.clone(), None)
    } else {
        let lines = note_lines(root, note).len() as u32;
        let (a, b) = root.split_vertically(h.saturating_sub(30 + NOTE_LINE * (lines - 1)));
        (a, Some(b))
    };
    Ok((body.titled(title, (FONT, 26)).map_err(e)?, foot))
}

/// Writes a figure's note into the footer strip made by [`frame`], wrapped to its width.
pub(crate) fn draw_note<DB: DrawingBackend>(
    foot: Option<DrawingArea<DB, Shift>>,
    note: &str,
) -> Result<(), FigureError> {
    if let Some(foot) = foot {
        for (i, line) in note_lines(&foot, note).into_iter().enumerate() {
            foot.draw(&Text::new(line, (TEXT_MARGIN as i32, 6 + (NOTE_LINE as i32) * i as i32), note_style()))
                .map_err(|e| FigureError(e.to_string()))?;
        }
    }
    Ok(())
}

/// A colour-blind-safe palette (Okabe–Ito), indexed cyclically.
pub(crate) fn color(i: usize) -> RGBColor {
    const P: [RGBColor; 7] = [
        RGBColor(0, 114, 178),
        RGBColor(213, 94, 0),
        RGBColor(0, 158, 115),
        RGBColor(204, 121, 167),
        RGBColor(230, 159, 0),
        RGBColor(86, 180, 233),
        RGBColor(40, 40, 40),
    ];
    P[i % P.len()]
}

/// An axis scale.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Scale {
    /// Linear.
    #[default]
    Linear,
    /// Logarithmic with ticks at powers of two and binary labels (1K = 1024): token counts.
    Log2,
    /// Logarithmic with ticks at powers of ten.
    Log10,
}

impl Scale {
    /// Whether the scale is logarithmic.
    pub(crate) fn is_log(self) -> bool {
        self != Scale::Linear
    }
    /// Data value to plotting coordinate.
    pub(crate) fn to(self, x: f64) -> f64 {
        if self.is_log() {
            x.log10()
        } else {
            x
        }
    }
    /// Plotting coordinate to data value.
    pub(crate) fn from(self, t: f64) -> f64 {
        if self.is_log() {
            10f64.powf(t)
        } else {
            t
        }
    }
    /// Whether the value can be drawn on this scale.
    pub(crate) fn valid(self, x: f64) -> bool {
        x.is_finite() && (!self.is_log() || x > 0.0)
    }
    /// The data extent with a little room on both sides.
    pub(crate) fn padded(self, (lo, hi): (f64, f64)) -> (f64, f64) {
        if self.is_log() {
            let (lo, hi) = if lo == hi { (lo / 2.0, hi * 2.0) } else { (lo, hi) };
            let f = (hi / lo).powf(0.03);
            (lo / f, hi * f)
        } else {
            let (lo, hi) = if lo == hi { (lo - 0.5, hi + 0.5) } else { (lo, hi) };
            let d = (hi - lo) * 0.03;
            (lo - d, hi + d)
        }
    }
    /// Tick label for a data value.
    pub(crate) fn label(self, x: f64) -> String {
        match self {
            Scale::Log2 => binary_label(x),
            Scale::Log10 => decimal_label(x),
            Scale::Linear => {
                let r = (x * 1e6).round() / 1e6;
                crate::sweep::fmt_num(if r == 0.0 { 0.0 } else { r })
            }
        }
    }
}

/// 1024 → "1K", 1048576 → "1M", 1536 → "1.5K".
pub(crate) fn binary_label(x: f64) -> String {
    let x = x.round();
    for (div, suf) in [(1u64 << 40, "T"), (1 << 30, "G"), (1 << 20, "M"), (1 << 10, "K")] {
        let d = div as f64;
        if x >= d {
            return format!("{}{suf}", crate::sweep::fmt_num((x / d * 100.0).round() / 100.0));
        }
    }
    format!("{x}")
}

/// 1000 → "1k", 2500000 → "2.5M".
pub(crate) fn decimal_label(x: f64) -> String {
    for (d, suf) in [(1e12, "T"), (1e9, "G"), (1e6, "M"), (1e3, "k")] {
        if x >= d {
            return format!("{}{suf}", crate::sweep::fmt_num((x / d * 100.0).round() / 100.0));
        }
    }
    crate::sweep::fmt_num((x * 1000.0).round() / 1000.0)
}

/// Tick positions (data units) for a padded range.
pub(crate) fn axis_ticks(scale: Scale, lo: f64, hi: f64) -> Vec<f64> {
    match scale {
        Scale::Linear => {
            let span = (hi - lo).max(1e-12);
            let raw = span / 6.0;
            let mag = 10f64.powf(raw.log10().floor());
            let step =
                [1.0, 2.0, 2.5, 5.0, 10.0].iter().map(|m| m * mag).find(|s| span / s <= 7.0).unwrap_or(10.0 * mag);
            let first = (lo / step).ceil() as i64;
            let last = (hi / step).floor() as i64;
            (first..=last).map(|i| crate::sweep::fmt_num(i as f64 * step).parse().unwrap_or(i as f64 * step)).collect()
        }
        Scale::Log2 => {
            let (a, b) = (lo.log2().ceil() as i32, hi.log2().floor() as i32);
            let n = (b - a + 1).max(1);
            let stride = ((n + 9) / 10).max(1);
            // Align on multiples of the stride so that 1K, 1M… are ticks.
            (a..=b).filter(|e| e.rem_euclid(stride) == 0).map(|e| 2f64.powi(e)).collect()
        }
        Scale::Log10 => {
            let (a, b) = (lo.log10().ceil() as i32, hi.log10().floor() as i32);
            let mut t: Vec<f64> = (a..=b).map(|e| 10f64.powi(e)).collect();
            if t.len() < 3 {
                let (a, b) = (lo.log10().floor() as i32, hi.log10().ceil() as i32);
                t = (a..=b)
                    .flat_map(|e| [1.0, 2.0, 5.0].map(|m| m * 10f64.powi(e)))
                    .filter(|x| *x >= lo && *x <= hi)
                    .collect();
            }
            t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_and_ticks() {
        assert_eq!(binary_label(1024.0), "1K");
        assert_eq!(binary_label(1048576.0), "1M");
        assert_eq!(binary_label(512.0), "512");
        assert_eq!(decimal_label(10000.0), "10k");
        assert_eq!(Scale::Linear.label(0.30000000000000004), "0.3");
        let t = axis_ticks(Scale::Log2, 900.0, 1.2e6);
        assert_eq!(t.first(), Some(&1024.0));
        assert_eq!(t.last(), Some(&1048576.0));
        assert_eq!(axis_ticks(Scale::Linear, -0.03, 1.03), [0.0, 0.2, 0.4, 0.6, 0.8, 1.0]);
        assert_eq!(axis_ticks(Scale::Log10, 0.9, 2e4), [1.0, 10.0, 100.0, 1000.0, 10000.0]);
    }
}

#[cfg(test)]
mod smoke {
    use super::*;

    #[test]
    fn renders_line_chart_and_heatmap() {
        let dir = std::env::var("DSA_SMOKE_DIR").map(PathBuf::from).unwrap_or_else(|_| std::env::temp_dir());
        let xs: Vec<f64> = (10..=20).map(|e| 2f64.powi(e)).collect();
        let series: Vec<Series> = [512.0, 1024.0, 2048.0]
            .iter()
            .enumerate()
            .map(|(i, k)| Series {
                label: format!("k = {k}"),
                color: i,
                dashed: i == 2,
                points: xs.iter().map(|x| (*x, (k * 4.0 / x).min(1.0))).collect(),
                band: vec![],
            })
            .collect();
        let c = LineChart {
            title: "Recall vs context length".into(),
            subtitle: "deepseek-v4-flash, dprime = 2".into(),
            x_label: "context length (tokens, log scale)".into(),
            y_label: "needle recall".into(),
            x_scale: Scale::Log2,
            y_range: Some((0.0, 1.0)),
            series,
            vlines: vec![RefLine { at: 2048.0, label: "horizon k=512".into(), color: 0 }],
            points: vec![PointSet {
                label: "transcribed (not measured)".into(),
                color: 6,
                points: vec![(4000.0, 0.2, 0.05, 0.5)],
            }],
            note: "Points: TRANSCRIBED from a qualitative report, not measured counts.".into(),
            ..Default::default()
        };
        let files = save_figure(&c, &dir, "smoke_line", (1000, 640)).unwrap();
        assert!(files.iter().all(|f| f.exists()));
        let h = Heatmap {
            title: "Needle in a haystack".into(),
            x_label: "context length (tokens)".into(),
            y_label: "needle depth".into(),
            x_cats: xs.iter().map(|x| binary_label(*x)).collect(),
            y_cats: (0..=10).map(|i| format!("{}", i as f64 / 10.0)).collect(),
            panels: vec![Panel {
                title: "k = 512".into(),
                values: (0..=10)
                    .map(|y| xs.iter().map(|x| Some((2048.0 / x * (1.0 + y as f64 / 10.0)).min(1.0))).collect())
                    .collect(),
            }],
            colors: CellColors::Continuous { label: "recall".into(), lo: 0.0, hi: 1.0 },
            annotate: true,
            note: String::new(),
        };
        save_figure(&h, &dir, "smoke_heat", (1000, 640)).unwrap();
    }
}

/// A linear f64 axis with explicit tick positions (plotting coordinates).
#[derive(Debug, Clone)]
pub(crate) struct Ticked {
    lo: f64,
    hi: f64,
    keys: Vec<f64>,
}

impl Ticked {
    /// An axis over `lo..hi` with ticks at `keys`.
    pub(crate) fn new(lo: f64, hi: f64, keys: Vec<f64>) -> Ticked {
        Ticked { lo, hi, keys }
    }
}

impl plotters::coord::ranged1d::Ranged for Ticked {
    type FormatOption = plotters::coord::ranged1d::DefaultFormatting;
    type ValueType = f64;
    fn map(&self, v: &f64, limit: (i32, i32)) -> i32 {
        let t = (v - self.lo) / (self.hi - self.lo);
        limit.0 + (t * (limit.1 - limit.0) as f64).round() as i32
    }
    fn key_points<Hint: plotters::coord::ranged1d::KeyPointHint>(&self, hint: Hint) -> Vec<f64> {
        if hint.weight().allow_light_points() {
            Vec::new()
        } else {
            self.keys.clone()
        }
    }
    fn range(&self) -> std::ops::Range<f64> {
        self.lo..self.hi
    }
}
