"""The playground's one colour language: a position's exit loop, the same in the text, the
heatmap and their legends.

Loop 1 is pale yellow and the last loop deep blue, mixed in sRGB (the space Plotly
interpolates in, so the heatmap's colour bar shows exactly the text's shades). Text on a
shade is dark up to the middle and white beyond; the mix skips the band in between,
where neither dark nor white text would reach a 4.5:1 contrast.
"""

from dataclasses import dataclass

SHALLOW = (0xFE, 0xF3, 0xC7)  # loop 1
DEEP = (0x1E, 0x3A, 0x8A)  # the last loop
DARK_TEXT, LIGHT_TEXT = "#1b1f24", "#ffffff"
SKIPPED_BAND = (0.5, 0.72)  # mix fractions left out: no text colour is readable there


@dataclass(frozen=True)
class Shade:
    loop: int
    background: str  # "#rrggbb"
    text: str  # dark or white, whichever the background needs

    @property
    def style(self) -> str:
        """The inline style of a token or legend swatch at this loop."""
        return f"background-color: {self.background}; color: {self.text}"


def loop_shades(loops: int) -> list[Shade]:
    """The shade of each loop 1..``loops``."""
    low, high = SKIPPED_BAND
    shades = []
    for loop in range(1, loops + 1):
        depth = 0.0 if loops <= 1 else (loop - 1) / (loops - 1)
        mix = depth if depth <= low else high + (depth - low) * (1 - high) / (1 - low)
        rgb = (round(a + (b - a) * mix) for a, b in zip(SHALLOW, DEEP, strict=True))
        text = DARK_TEXT if depth <= low else LIGHT_TEXT
        shades.append(Shade(loop, "#" + "".join(f"{c:02x}" for c in rgb), text))
    return shades


def loop_colourscale(loops: int) -> list[list[float | str]]:
    """A Plotly colourscale over z in [0.5, loops + 0.5]: one flat band per loop."""
    scale: list[list[float | str]] = []
    for shade in loop_shades(loops):
        scale += [
            [(shade.loop - 1) / loops, shade.background],
            [shade.loop / loops, shade.background],
        ]
    return scale
