//! Line charts (curves with optional bands, reference lines and measured points with intervals),
//! drawn with plotters to SVG and PNG.

use super::{axis_ticks, color, draw_note, frame, Figure, FigureError, Scale, FONT};
use plotters::coord::Shift;
use plotters::prelude::*;

/// One curve, optionally with a shaded band.
#[derive(Debug, Clone, Default)]
pub(crate) struct Series {
    /// Legend text.
    pub(crate) label: String,
    /// Palette index.
    pub(crate) color: usize,
    /// Draw dashed.
    pub(crate) dashed: bool,
    /// (x, y) points, in x order.
    pub(crate) points: Vec<(f64, f64)>,
    /// (x, low, high): a shaded band (e.g. the 5–95% range) around the curve.
    pub(crate) band: Vec<(f64, f64, f64)>,
}

/// A vertical or horizontal reference line.
#[derive(Debug, Clone)]
pub(crate) struct RefLine {
    /// Where (data units).
    pub(crate) at: f64,
    /// Text written next to the line.
    pub(crate) label: String,
    /// Palette index.
    pub(crate) color: usize,
}

/// Measured points with their 95% intervals.
#[derive(Debug, Clone, Default)]
pub(crate) struct PointSet {
    /// Legend text.
    pub(crate) label: String,
    /// Palette index.
    pub(crate) color: usize,
    /// (x, y, low, high).
    pub(crate) points: Vec<(f64, f64, f64, f64)>,
}

/// A line chart.
#[derive(Debug, Clone, Default)]
pub(crate) struct LineChart {
    /// Title.
    pub(crate) title: String,
    /// Second title line (smaller).
    pub(crate) subtitle: String,
    /// X axis label, with units.
    pub(crate) x_label: String,
    /// Y axis label, with units.
    pub(crate) y_label: String,
    /// X scale.
    pub(crate) x_scale: Scale,
    /// Y scale.
    pub(crate) y_scale: Scale,
    /// Fixed y range (data units); otherwise from the data.
    pub(crate) y_range: Option<(f64, f64)>,
    /// Curves.
    pub(crate) series: Vec<Series>,
    /// Vertical reference lines.
    pub(crate) vlines: Vec<RefLine>,
    /// Horizontal reference lines.
    pub(crate) hlines: Vec<RefLine>,
    /// Measured points.
    pub(crate) points: Vec<PointSet>,
    /// A note printed under the plot (e.g. the provenance of overlaid data).
    pub(crate) note: String,
    /// Where the legend goes.
    pub(crate) legend: Corner,
}

/// A corner of the plotting area (for the legend).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) enum Corner {
    /// Upper left.
    UpperLeft,
    /// Upper right.
    UpperRight,
    /// Lower left.
    #[default]
    LowerLeft,
    /// Lower right.
    LowerRight,
}

fn extent(vals: impl Iterator<Item = f64>, scale: Scale) -> Option<(f64, f64)> {
    let mut lo = f64::INFINITY;
    let mut hi = f64::NEG_INFINITY;
    for v in vals {
        if v.is_finite() && (scale != Scale::Log2 && scale != Scale::Log10 || v > 0.0) {
            lo = lo.min(v);
            hi = hi.max(v);
        }
    }
    (lo <= hi).then_some((lo, hi))
}

impl LineChart {
    fn x_extent(&self) -> (f64, f64) {
        let xs = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.0).chain(s.band.iter().map(|b| b.0)))
            .chain(self.points.iter().flat_map(|p| p.points.iter().map(|q| q.0)));
        extent(xs, self.x_scale).unwrap_or((1.0, 10.0))
    }

    fn y_extent(&self) -> (f64, f64) {
        if let Some(r) = self.y_range {
            return r;
        }
        let ys = self
            .series
            .iter()
            .flat_map(|s| s.points.iter().map(|p| p.1).chain(s.band.iter().flat_map(|b| [b.1, b.2])))
            .chain(self.points.iter().flat_map(|p| p.points.iter().flat_map(|q| [q.1, q.2, q.3])))
            .chain(self.hlines.iter().map(|h| h.at));
        extent(ys, self.y_scale).unwrap_or((1.0, 10.0))
    }
}

impl Figure for LineChart {
    fn draw<DB: DrawingBackend>(&self, root: &DrawingArea<DB, Shift>) -> Result<(), FigureError> {
        let e = |e: DrawingAreaErrorKind<DB::ErrorType>| FigureError(e.to_string());
        let (w, _) = root.dim_in_pixel();
        let (body, foot) = frame(root, &self.title, &self.note)?;
        let body = if self.subtitle.is_empty() {
            body
        } else {
            // Wrapped to the canvas, each line centred, 20 pixels apart.
            let style =
                (FONT, 16).into_font().color(&RGBColor(70, 70, 70)).pos(plotters::style::text_anchor::Pos::new(
                    plotters::style::text_anchor::HPos::Center,
                    plotters::style::text_anchor::VPos::Top,
                ));
            let lines = super::wrap_text(&body, &self.subtitle, &style, w.saturating_sub(2 * super::TEXT_MARGIN));
            for (i, line) in lines.iter().enumerate() {
                body.draw(&Text::new(line.clone(), (w as i32 / 2, 20 * i as i32), style.clone())).map_err(e)?;
            }
            body.margin(22 + 20 * (lines.len() as u32 - 1), 0, 0, 0)
        };
        let (x0, x1) = self.x_scale.padded(self.x_extent());
        let (y0, y1) = self.y_scale.padded(self.y_extent());
        let (tx0, tx1, ty0, ty1) = (self.x_scale.to(x0), self.x_scale.to(x1), self.y_scale.to(y0), self.y_scale.to(y1));
        let xt = axis_ticks(self.x_scale, x0, x1);
        let yt = axis_ticks(self.y_scale, y0, y1);
        let mut chart = ChartBuilder::on(&body)
            .margin(12)
            .margin_right(24)
            .x_label_area_size(55)
            .y_label_area_size(75)
            .build_cartesian_2d(
                super::Ticked::new(tx0, tx1, xt.iter().map(|t| self.x_scale.to(*t)).collect()),
                super::Ticked::new(ty0, ty1, yt.iter().map(|t| self.y_scale.to(*t)).collect()),
            )
            .map_err(e)?;
        let (xs, ys) = (self.x_scale, self.y_scale);
        chart
            .configure_mesh()
            .x_desc(self.x_label.as_str())
            .y_desc(self.y_label.as_str())
            .label_style((FONT, 16))
            .axis_desc_style((FONT, 18))
            .x_label_formatter(&|v| xs.label(xs.from(*v)))
            .y_label_formatter(&|v| ys.label(ys.from(*v)))
            .light_line_style(WHITE)
            .bold_line_style(RGBColor(225, 225, 225))
            .draw()
            .map_err(e)?;
        let tr = |x: f64, y: f64| (xs.to(x), ys.to(y));
        let ok = |x: f64, y: f64| x.is_finite() && y.is_finite() && xs.valid(x) && ys.valid(y);
        for s in &self.series {
            if s.band.len() >= 2 {
                let c = color(s.color).mix(0.18);
                let mut poly: Vec<(f64, f64)> =
                    s.band.iter().filter(|b| ok(b.0, b.1) && ok(b.0, b.2)).map(|b| tr(b.0, b.1)).collect();
                poly.extend(s.band.iter().rev().filter(|b| ok(b.0, b.1) && ok(b.0, b.2)).map(|b| tr(b.0, b.2)));
                chart.draw_series(std::iter::once(Polygon::new(poly, c.filled()))).map_err(e)?;
            }
        }
        for l in &self.vlines {
            if !xs.valid(l.at) || xs.to(l.at) < tx0 || xs.to(l.at) > tx1 {
                continue;
            }
            let x = xs.to(l.at);
            let style = color(l.color).stroke_width(1);
            chart.draw_series(DashedLineSeries::new(vec![(x, ty0), (x, ty1)], 4, 4, style)).map_err(e)?;
            let t = EmptyElement::at((x, ty1))
                + Text::new(
                    l.label.clone(),
                    (16, 6),
                    (FONT, 13).into_font().color(&color(l.color)).transform(FontTransform::Rotate90),
                );
            chart.draw_series(std::iter::once(t)).map_err(e)?;
        }
        for l in &self.hlines {
            if !ys.valid(l.at) || ys.to(l.at) < ty0 || ys.to(l.at) > ty1 {
                continue;
            }
            let y = ys.to(l.at);
            let style = color(l.color).stroke_width(1);
            chart.draw_series(DashedLineSeries::new(vec![(tx0, y), (tx1, y)], 4, 4, style)).map_err(e)?;
            let t = EmptyElement::at((tx0, y))
                + Text::new(l.label.clone(), (6, -17), (FONT, 13).into_font().color(&color(l.color)));
            chart.draw_series(std::iter::once(t)).map_err(e)?;
        }
        for s in &self.series {
            let pts: Vec<(f64, f64)> = s.points.iter().filter(|p| ok(p.0, p.1)).map(|p| tr(p.0, p.1)).collect();
            let c = color(s.color);
            let style = c.stroke_width(2);
            let anno = if s.dashed {
                chart.draw_series(DashedLineSeries::new(pts.clone(), 8, 5, style)).map_err(e)?
            } else {
                chart.draw_series(LineSeries::new(pts.clone(), style)).map_err(e)?
            };
            if !s.label.is_empty() {
                let dashed = s.dashed;
                anno.label(s.label.clone()).legend(move |(x, y)| {
                    if dashed {
                        PathElement::new(vec![(x, y), (x + 8, y)], c.stroke_width(2))
                    } else {
                        PathElement::new(vec![(x, y), (x + 20, y)], c.stroke_width(2))
                    }
                });
            }
            if pts.len() <= 40 {
                chart.draw_series(pts.iter().map(|p| Circle::new(*p, 2, c.filled()))).map_err(e)?;
            }
        }
        for p in &self.points {
            let c = color(p.color);
            let pts: Vec<_> = p.points.iter().filter(|q| ok(q.0, q.1) && ok(q.0, q.2) && ok(q.0, q.3)).collect();
            for q in &pts {
                let (x, lo) = tr(q.0, q.2);
                let hi = ys.to(q.3);
                chart
                    .draw_series(std::iter::once(PathElement::new(vec![(x, lo), (x, hi)], c.stroke_width(2))))
                    .map_err(e)?;
            }
            let anno = chart
                .draw_series(pts.iter().map(|q| {
                    let at = tr(q.0, q.1);
                    EmptyElement::at(at)
                        + Rectangle::new([(-5, -5), (5, 5)], ShapeStyle::from(&WHITE).filled())
                        + Rectangle::new([(-5, -5), (5, 5)], c.stroke_width(2))
                }))
                .map_err(e)?;
            if !p.label.is_empty() {
                anno.label(p.label.clone())
                    .legend(move |(x, y)| Rectangle::new([(x + 5, y - 5), (x + 15, y + 5)], c.stroke_width(2)));
            }
        }
        chart
            .configure_series_labels()
            .label_font((FONT, 15))
            .background_style(WHITE.mix(0.85))
            .border_style(RGBColor(180, 180, 180))
            .position(match self.legend {
                Corner::UpperLeft => SeriesLabelPosition::UpperLeft,
                Corner::UpperRight => SeriesLabelPosition::UpperRight,
                Corner::LowerLeft => SeriesLabelPosition::LowerLeft,
                Corner::LowerRight => SeriesLabelPosition::LowerRight,
            })
            .draw()
            .map_err(e)?;
        draw_note(foot, &self.note)?;
        Ok(())
    }
}
