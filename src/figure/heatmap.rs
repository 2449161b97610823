//! Heatmaps over two sweep axes (one panel per value of a facet field), with a continuous
//! colour scale or named categories (the regime map).

use super::{draw_note, frame, Figure, FigureError, FONT};
use plotters::coord::Shift;
use plotters::prelude::*;

/// How cell values become colours.
#[derive(Debug, Clone)]
pub(crate) enum CellColors {
    /// A continuous value in [lo, hi] on a viridis-like scale, with a colour bar.
    Continuous {
        /// Colour bar label.
        label: String,
        /// Value of the darkest colour.
        lo: f64,
        /// Value of the brightest colour.
        hi: f64,
    },
    /// The value is the index of a category: (legend text, colour).
    Categorical(Vec<(String, RGBColor)>),
}

/// One panel: `values[y][x]` (`None` = no data).
#[derive(Debug, Clone)]
pub(crate) struct Panel {
    /// Panel title (e.g. `k = 512`).
    pub(crate) title: String,
    /// Cell values, rows by y category.
    pub(crate) values: Vec<Vec<Option<f64>>>,
}

/// A heatmap figure.
#[derive(Debug, Clone)]
pub(crate) struct Heatmap {
    /// Title.
    pub(crate) title: String,
    /// X axis label.
    pub(crate) x_label: String,
    /// Y axis label.
    pub(crate) y_label: String,
    /// X category labels, left to right.
    pub(crate) x_cats: Vec<String>,
    /// Y category labels, bottom to top.
    pub(crate) y_cats: Vec<String>,
    /// Panels, left to right.
    pub(crate) panels: Vec<Panel>,
    /// Colour scale.
    pub(crate) colors: CellColors,
    /// Print each cell's value (continuous scale only).
    pub(crate) annotate: bool,
    /// A note printed under the plot.
    pub(crate) note: String,
}

/// A viridis-like colour for t in [0, 1].
pub(crate) fn viridis(t: f64) -> RGBColor {
    const STOPS: [(f64, f64, f64); 6] = [
        (68.0, 1.0, 84.0),
        (65.0, 68.0, 135.0),
        (42.0, 120.0, 142.0),
        (34.0, 168.0, 132.0),
        (122.0, 209.0, 81.0),
        (253.0, 231.0, 37.0),
    ];
    let t = if t.is_finite() { t.clamp(0.0, 1.0) } else { 0.0 };
    let f = t * (STOPS.len() - 1) as f64;
    let i = (f.floor() as usize).min(STOPS.len() - 2);
    let u = f - i as f64;
    let (a, b) = (STOPS[i], STOPS[i + 1]);
    let mix = |x: f64, y: f64| (x + (y - x) * u).round() as u8;
    RGBColor(mix(a.0, b.0), mix(a.1, b.1), mix(a.2, b.2))
}

fn thin_labels(n: usize, max: usize) -> usize {
    n.div_ceil(max).max(1)
}

impl Heatmap {
    fn cell_color(&self, v: f64) -> RGBColor {
        match &self.colors {
            CellColors::Continuous { lo, hi, .. } => viridis((v - lo) / (hi - lo).max(1e-300)),
            CellColors::Categorical(c) => c.get(v.max(0.0) as usize).map_or(RGBColor(200, 200, 200), |x| x.1),
        }
    }
}

impl Figure for Heatmap {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), FigureError> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| FigureError(e.to_string());
        let (w, _) = root.dim_in_pixel();
        let (body, foot) = frame(root, &self.title, &self.note)?;
        let side = match &self.colors {
            CellColors::Continuous { .. } => 110,
            CellColors::Categorical(_) => 260,
        };
        let (plots, key) = body.split_horizontally(w.saturating_sub(side));
        let np = self.panels.len().max(1);
        let areas = plots.split_evenly((1, np));
        let (nx, ny) = (self.x_cats.len(), self.y_cats.len());
        let xstep = thin_labels(nx, (12 / np).max(4));
        let ystep = thin_labels(ny, 12);
        for (pi, (panel, area)) in self.panels.iter().zip(areas.iter()).enumerate() {
            // The panel's title, wrapped to the panel's width, each line centred.
            let style = (FONT, 20).into_font().color(&BLACK).pos(plotters::style::text_anchor::Pos::new(
                plotters::style::text_anchor::HPos::Center,
                plotters::style::text_anchor::VPos::Top,
            ));
            let aw = area.dim_in_pixel().0;
            let lines = super::wrap_text(area, &panel.title, &style, aw.saturating_sub(2 * super::TEXT_MARGIN));
            for (i, line) in lines.iter().enumerate() {
                area.draw(&Text::new(line.clone(), (aw as i32 / 2, 8 + 24 * i as i32), style.clone())).map_err(e)?;
            }
            let area = &area.margin(8 + 24 * lines.len() as u32, 0, 0, 0);
            let mut chart = ChartBuilder::on(area)
                .margin(8)
                .x_label_area_size(55)
                .y_label_area_size(if pi == 0 { 70 } else { 20 })
                .build_cartesian_2d(
                    super::Ticked::new(0.0, nx as f64, (0..nx).step_by(xstep).map(|i| i as f64 + 0.5).collect()),
                    super::Ticked::new(0.0, ny as f64, (0..ny).step_by(ystep).map(|i| i as f64 + 0.5).collect()),
                )
                .map_err(e)?;
            let xc = &self.x_cats;
            let yc = &self.y_cats;
            let xf = |v: &f64| xc.get(v.floor() as usize).cloned().unwrap_or_default();
            let yf = |v: &f64| yc.get(v.floor() as usize).cloned().unwrap_or_default();
            let nof = |_: &f64| String::new();
            let mut mesh = chart.configure_mesh();
            mesh.disable_mesh()
                .x_desc(self.x_label.as_str())
                .label_style((FONT, 15))
                .axis_desc_style((FONT, 17))
                .x_label_formatter(&xf);
            if pi == 0 {
                mesh.y_desc(self.y_label.as_str()).y_label_formatter(&yf);
            } else {
                mesh.y_label_formatter(&nof);
            }
            mesh.draw().map_err(e)?;
            let mut cells = Vec::new();
            for (yi, row) in panel.values.iter().enumerate() {
                for (xi, v) in row.iter().enumerate() {
                    let c = v.map_or(RGBColor(220, 220, 220), |v| self.cell_color(v));
                    cells
                        .push(Rectangle::new([(xi as f64, yi as f64), (xi as f64 + 1.0, yi as f64 + 1.0)], c.filled()));
                }
            }
            chart.draw_series(cells).map_err(e)?;
            let cell_px = area.dim_in_pixel().0 as usize / nx.max(1);
            if self.annotate && matches!(self.colors, CellColors::Continuous { .. }) && cell_px >= 34 && ny <= 24 {
                let mut texts = Vec::new();
                for (yi, row) in panel.values.iter().enumerate() {
                    for (xi, v) in row.iter().enumerate() {
                        if let Some(v) = v {
                            let dark = self.cell_color(*v);
                            let lum = 0.3 * dark.0 as f64 + 0.59 * dark.1 as f64 + 0.11 * dark.2 as f64;
                            let tc = if lum > 140.0 { BLACK } else { WHITE };
                            let style = (FONT, 12).into_font().color(&tc).pos(plotters::style::text_anchor::Pos::new(
                                plotters::style::text_anchor::HPos::Center,
                                plotters::style::text_anchor::VPos::Center,
                            ));
                            texts.push(Text::new(format!("{:.2}", v), (xi as f64 + 0.5, yi as f64 + 0.5), style));
                        }
                    }
                }
                chart.draw_series(texts).map_err(e)?;
            }
        }
        match &self.colors {
            CellColors::Continuous { label, lo, hi } => {
                let (head, key) = key.split_vertically(70);
                head.draw(&Text::new(label.clone(), (10, 40), (FONT, 15))).map_err(e)?;
                let key = key.margin(0, 70, 10, 30);
                let mut bar = ChartBuilder::on(&key)
                    .y_label_area_size(0)
                    .right_y_label_area_size(45)
                    .build_cartesian_2d(0f64..1f64, *lo..*hi)
                    .map_err(e)?;
                bar.configure_mesh()
                    .disable_mesh()
                    .disable_x_axis()
                    .y_labels(6)
                    .label_style((FONT, 14))
                    .draw()
                    .map_err(e)?;
                let n = 100;
                bar.draw_series((0..n).map(|i| {
                    let a = lo + (hi - lo) * i as f64 / n as f64;
                    let b = lo + (hi - lo) * (i + 1) as f64 / n as f64;
                    Rectangle::new([(0.0, a), (1.0, b)], viridis(i as f64 / (n - 1) as f64).filled())
                }))
                .map_err(e)?;
            }
            CellColors::Categorical(cats) => {
                let key = key.margin(60, 10, 10, 10);
                let room = key.dim_in_pixel().0.saturating_sub(26 + 4);
                let style: TextStyle = (FONT, 15).into();
                let mut y = 0i32;
                for (name, c) in cats {
                    key.draw(&Rectangle::new([(0, y), (18, y + 18)], c.filled())).map_err(e)?;
                    // Each entry wrapped to the key's width, 18 pixels a line.
                    let lines = super::wrap_text(&key, name, &style, room);
                    for (j, line) in lines.iter().enumerate() {
                        key.draw(&Text::new(line.clone(), (26, y + 2 + 18 * j as i32), style.clone())).map_err(e)?;
                    }
                    y += 30 + 18 * (lines.len() as i32 - 1);
                }
            }
        }
        draw_note(foot, &self.note)?;
        Ok(())
    }
}
