//! Just enough of a PNG reader to look at the pixels of a chromium screenshot: 8-bit RGB or RGBA,
//! not interlaced (what `Page.captureScreenshot` writes), inflated with flate2 (a dependency
//! already) and unfiltered. Anything else is refused with a message, not guessed at.

use std::io::Read;

/// A decoded image: `width × height` pixels of `channels` bytes each, row after row.
pub struct Image {
    pub width: usize,
    pub height: usize,
    pub channels: usize,
    pub data: Vec<u8>,
}

impl Image {
    /// The RGB of the pixel at (`x`, `y`).
    pub fn rgb(&self, x: usize, y: usize) -> [u8; 3] {
        let at = (y * self.width + x) * self.channels;
        [self.data[at], self.data[at + 1], self.data[at + 2]]
    }
}

fn be32(b: &[u8]) -> usize {
    u32::from_be_bytes([b[0], b[1], b[2], b[3]]) as usize
}

/// Decodes `png`; an error says what is not supported or broken.
pub fn decode(png: &[u8]) -> Result<Image, String> {
    let mut rest = png
        .strip_prefix(b"\x89PNG\r\n\x1a\n".as_slice())
        .ok_or("not a PNG signature")?;
    let (mut width, mut height, mut channels) = (0, 0, 0);
    let mut compressed = Vec::new();
    while rest.len() >= 12 {
        let len = be32(rest);
        let kind = &rest[4..8];
        let body = rest.get(8..8 + len).ok_or("a chunk runs past the end")?;
        match kind {
            b"IHDR" => {
                width = be32(&body[0..4]);
                height = be32(&body[4..8]);
                let (depth, colour, interlace) = (body[8], body[9], body[12]);
                channels = match colour {
                    2 => 3,
                    6 => 4,
                    other => return Err(format!("colour type {other} is not supported")),
                };
                if depth != 8 || interlace != 0 {
                    return Err(format!(
                        "depth {depth}, interlace {interlace}: not supported"
                    ));
                }
            }
            b"IDAT" => compressed.extend_from_slice(body),
            b"IEND" => break,
            _ => {}
        }
        rest = &rest[12 + len..];
    }
    let mut raw = Vec::new();
    flate2::read::ZlibDecoder::new(compressed.as_slice())
        .read_to_end(&mut raw)
        .map_err(|e| format!("inflate: {e}"))?;
    let stride = width * channels;
    if raw.len() != height * (stride + 1) {
        return Err(format!("{} bytes for {width}×{height}", raw.len()));
    }
    let mut data = vec![0u8; height * stride];
    for y in 0..height {
        let filter = raw[y * (stride + 1)];
        let line = &raw[y * (stride + 1) + 1..(y + 1) * (stride + 1)];
        for i in 0..stride {
            let a = if i >= channels {
                data[y * stride + i - channels]
            } else {
                0
            };
            let b = if y > 0 { data[(y - 1) * stride + i] } else { 0 };
            let c = if y > 0 && i >= channels {
                data[(y - 1) * stride + i - channels]
            } else {
                0
            };
            let predicted = match filter {
                0 => 0,
                1 => a,
                2 => b,
                3 => ((u16::from(a) + u16::from(b)) / 2) as u8,
                4 => paeth(a, b, c),
                other => return Err(format!("filter type {other}")),
            };
            data[y * stride + i] = line[i].wrapping_add(predicted);
        }
    }
    Ok(Image {
        width,
        height,
        channels,
        data,
    })
}

/// The Paeth predictor: whichever of left, up, upper-left is nearest to left + up − upper-left.
fn paeth(a: u8, b: u8, c: u8) -> u8 {
    let p = i16::from(a) + i16::from(b) - i16::from(c);
    let (pa, pb, pc) = (
        (p - i16::from(a)).abs(),
        (p - i16::from(b)).abs(),
        (p - i16::from(c)).abs(),
    );
    if pa <= pb && pa <= pc {
        a
    } else if pb <= pc {
        b
    } else {
        c
    }
}
