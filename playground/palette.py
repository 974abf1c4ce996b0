"""The playground's one colour language: a position's exit loop, the same in the text, the
heatmap and their legends.

Loop 1 is pale yellow and the last loop deep blue: the shallow half of the loops runs from
pale yellow to light green under dark text, the deep half from dark teal to deep blue under
white text. Each half is mixed in sRGB (the space Plotly interpolates in, so the heatmap's
colour bar shows exactly the text's shades), both keep a 4.5:1 contrast with their text,
and none is grey, the colour of a loop that was not computed.
"""

from dataclasses import dataclass

# (first, last) colour of each half of the loops, and the text colour on it
SHALLOW = ((0xFE, 0xF3, 0xC7), (0x86, 0xEF, 0xAC))  # loop 1 .. the middle
DEEP = ((0x0F, 0x76, 0x6E), (0x1E, 0x3A, 0x8A))  # past the middle .. the last loop
DARK_TEXT, LIGHT_TEXT = "#1b1f24", "#ffffff"


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
    shades = []
    for loop in range(1, loops + 1):
        depth = 0.0 if loops <= 1 else (loop - 1) / (loops - 1)
        deep = depth > 0.5
        (first, last), mix = (DEEP, 2 * depth - 1) if deep else (SHALLOW, 2 * depth)
        rgb = (round(a + (b - a) * mix) for a, b in zip(first, last, strict=True))
        text = LIGHT_TEXT if deep else DARK_TEXT
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
