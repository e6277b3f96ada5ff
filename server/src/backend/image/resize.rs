//! Padding a picture to a square and resizing it to the encoder's input,
//! as Rockchip's multimodal demo does.
//!
//! The picture, as RGB, is padded to a square with the model's background
//! colour (centred), then resized to the encoder's input size with bilinear
//! interpolation as OpenCV's `INTER_LINEAR` does it (four neighbours around
//! each output pixel's centre, no smoothing when shrinking). Both steps are
//! done at once: the picture is resized straight to the part of the input
//! the square's content covers, and the bands around it are filled with the
//! background, without building the padded square first.
//!
//! The picture is read only where the interpolation samples it: for each
//! output row, the two source rows around it at the two columns around
//! each output pixel, converted to 8-bit RGB there. A picture decoded in
//! another layout (grey, RGBA, 16-bit) is never converted whole, and
//! nothing the resize holds grows with the picture: it is sized by the
//! output.

use image::{DynamicImage, GenericImageView, RgbImage};

/// A picture the resize samples, as 8-bit RGB.
pub trait RgbSource {
    /// Width and height in pixels.
    fn size(&self) -> (u32, u32);
    /// Writes the pixels of row `y` at `columns`, as RGB (three bytes a
    /// pixel), into `out`, which is three times as long as `columns`.
    fn gather(&self, y: u32, columns: &[u32], out: &mut [u8]);
}

impl RgbSource for RgbImage {
    fn size(&self) -> (u32, u32) {
        self.dimensions()
    }

    fn gather(&self, y: u32, columns: &[u32], out: &mut [u8]) {
        let stride = self.width() as usize * 3;
        let row = &self.as_raw()[y as usize * stride..][..stride];
        for (&x, pixel) in columns.iter().zip(out.chunks_exact_mut(3)) {
            pixel.copy_from_slice(&row[x as usize * 3..][..3]);
        }
    }
}

impl RgbSource for DynamicImage {
    fn size(&self) -> (u32, u32) {
        (self.width(), self.height())
    }

    fn gather(&self, y: u32, columns: &[u32], out: &mut [u8]) {
        match self.as_rgb8() {
            Some(rgb) => rgb.gather(y, columns, out),
            // The crate's own conversion (to RGBA, 8-bit), pixel by pixel.
            None => {
                for (&x, pixel) in columns.iter().zip(out.chunks_exact_mut(3)) {
                    pixel.copy_from_slice(&self.get_pixel(x, y).0[..3]);
                }
            }
        }
    }
}

/// Pads `picture` to a square with `background` and resizes it to
/// `width` × `height`, in one resize of the picture alone.
pub fn fit(picture: &impl RgbSource, width: u32, height: u32, background: [u8; 3]) -> RgbImage {
    let (w, h) = picture.size();
    let side = f64::from(w.max(h));
    // The picture's share of the square, scaled to the target.
    let content_w = ((f64::from(w) * f64::from(width) / side).round() as u32).clamp(1, width);
    let content_h = ((f64::from(h) * f64::from(height) / side).round() as u32).clamp(1, height);
    let mut canvas = RgbImage::from_pixel(width, height, image::Rgb(background));
    let (x0, y0) = ((width - content_w) / 2, (height - content_h) / 2);
    let stride = width as usize * 3;
    bilinear(
        picture,
        content_w,
        content_h,
        &mut canvas,
        (x0 as usize * 3, y0 as usize),
        stride,
    );
    canvas
}

/// One output coordinate's two source neighbours and the second one's
/// weight, in 1/2048ths (OpenCV's pixel-centre mapping, clamped at the
/// edges).
fn taps(out: u32, source: u32) -> Vec<(usize, usize, u32)> {
    let scale = f64::from(source) / f64::from(out);
    let last = source as usize - 1;
    (0..out)
        .map(|i| {
            let at = ((f64::from(i) + 0.5) * scale - 0.5).max(0.0);
            let left = (at.floor() as usize).min(last);
            let right = (left + 1).min(last);
            let weight = ((at - left as f64) * 2048.0).round().clamp(0.0, 2048.0) as u32;
            (left, right, weight)
        })
        .collect()
}

/// One source row's samples (two pixels per output pixel, as RGB), and
/// which row it is.
struct Row {
    index: Option<usize>,
    rgb: Vec<u8>,
}

impl Row {
    fn load(&mut self, picture: &impl RgbSource, index: usize, columns: &[u32]) {
        if self.index != Some(index) {
            picture.gather(index as u32, columns, &mut self.rgb);
            self.index = Some(index);
        }
    }
}

/// Resizes `picture` to `out_w` × `out_h` into `canvas`, whose row
/// `top + y` at byte `left + 3x` receives output pixel (x, y).
fn bilinear(
    picture: &impl RgbSource,
    out_w: u32,
    out_h: u32,
    canvas: &mut RgbImage,
    (left, top): (usize, usize),
    stride: usize,
) {
    let (w, h) = picture.size();
    let xs = taps(out_w, w);
    let ys = taps(out_h, h);
    // Each output pixel's left and right source columns, in order.
    let columns: Vec<u32> = xs
        .iter()
        .flat_map(|&(l, r, _)| [l as u32, r as u32])
        .collect();
    let out = &mut **canvas;
    let blank = || Row {
        index: None,
        rgb: vec![0; columns.len() * 3],
    };
    // The two source rows of the current output row; both only move down.
    let (mut upper, mut lower) = (blank(), blank());
    for (y, &(top_row, bottom_row, wy)) in ys.iter().enumerate() {
        if upper.index != Some(top_row) && lower.index == Some(top_row) {
            std::mem::swap(&mut upper, &mut lower);
        }
        upper.load(picture, top_row, &columns);
        lower.load(picture, bottom_row, &columns);
        let (upper, lower) = (&upper.rgb[..], &lower.rgb[..]);
        let row = &mut out[(top + y) * stride + left..][..out_w as usize * 3];
        for (i, (pixel, &(_, _, wx))) in row.chunks_exact_mut(3).zip(&xs).enumerate() {
            for c in 0..3 {
                // This pixel's left sample, then its right one.
                let mix = |line: &[u8]| {
                    u32::from(line[i * 6 + c]) * (2048 - wx) + u32::from(line[i * 6 + 3 + c]) * wx
                };
                let value = mix(upper) * (2048 - wy) + mix(lower) * wy;
                // Rounded: the sum carries 2048 × 2048 = 2^22 of scale.
                pixel[c] = ((value + (1 << 21)) >> 22) as u8;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bilinear_takes_the_two_neighbours_of_each_pixel_centre() {
        // 4x1 to 2x1: output centres fall at source 0.5 and 2.5.
        let picture = RgbImage::from_fn(4, 1, |x, _| {
            let v = [0, 100, 200, 255][x as usize];
            image::Rgb([v, v, v])
        });
        let out = fit(&picture, 2, 2, [7, 7, 7]);
        // The 4x1 picture in a 4x4 square, on 2x2: one content row of 2 at y 0
        // (rounded 0.5 up to 1 row, centred at (2 - 1) / 2 = 0).
        assert_eq!(out.get_pixel(0, 0).0, [50, 50, 50]);
        assert_eq!(out.get_pixel(1, 0).0, [228, 228, 228]);
        assert_eq!(out.get_pixel(0, 1).0, [7, 7, 7]);
        // Same size: the picture itself.
        let same = fit(&picture, 4, 1, [0, 0, 0]);
        assert_eq!(same.get_pixel(1, 0).0, [100, 100, 100]);
    }

    #[test]
    fn a_picture_in_another_layout_resizes_as_its_rgb_conversion_does() {
        // Rows of varied content, enlarged and shrunk, so that rows are
        // reused, skipped and swapped between the two kept.
        let rgba = image::RgbaImage::from_fn(37, 23, |x, y| {
            image::Rgba([
                (x * 7) as u8,
                (y * 11) as u8,
                ((x + y) * 5) as u8,
                (x * y) as u8,
            ])
        });
        let grey16 = image::ImageBuffer::<image::Luma<u16>, _>::from_fn(19, 41, |x, y| {
            image::Luma([(x * 3000 + y * 700) as u16])
        });
        let pictures = [
            DynamicImage::ImageRgba8(rgba.clone()),
            DynamicImage::ImageLuma16(grey16.clone()),
            DynamicImage::ImageLuma16(grey16).into_luma_alpha8().into(),
            DynamicImage::ImageRgba8(rgba).into_rgba16().into(),
        ];
        for picture in pictures {
            let whole = picture.to_rgb8();
            for (w, h) in [(64, 64), (8, 8), (50, 13)] {
                assert_eq!(
                    fit(&picture, w, h, [1, 2, 3]),
                    fit(&whole, w, h, [1, 2, 3]),
                    "{:?} to {w}x{h}",
                    picture.color()
                );
            }
        }
    }
}
