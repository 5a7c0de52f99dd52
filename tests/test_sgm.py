"""WMT SGM readers: the real releases' quirks on a fixture, and byte-for-byte agreement with the plain text of
newstest2012/2013/2014 in ../shared/data."""

from __future__ import annotations

import pytest

from rnnsearch.data.corpus.sgm import read_sgm
from rnnsearch.textio import InputError, read_lines

QUIRKS = """<srcset setid="newstest2011" srclang="any">
<DOC docid="a" genre="news" origlang="cs">
<h1>
<seg id="7">Parliament Does Not Support Amendment</seg>
</h1>
<p>
<SEG ID="8">  Tom &amp; Jerry &lt;3 AT&T &#233;t&#xE9;  </SEG>
<seg origlang="en" id="9">a segment
   split over   two lines</seg >
</p>
</DOC>
<doc genre="news" docid="b"><seg id="1">Runs  of  spaces stay.</seg></doc>
</srcset>
"""


def test_the_quirks_of_real_releases(tmp_path):
    (tmp_path / "q.sgm").write_text(QUIRKS, encoding="utf-8")
    assert read_sgm(tmp_path / "q.sgm") == [
        "Parliament Does Not Support Amendment",
        "Tom & Jerry <3 AT&T été",
        "a segment split over   two lines",
        "Runs  of  spaces stay.",
    ]


def test_broken_files_are_errors_naming_the_line(tmp_path):
    (tmp_path / "open.sgm").write_text('<doc>\n<seg id="1">fine</seg>\n<seg id="2">never closed\n</doc>\n')
    with pytest.raises(InputError, match=r"open.sgm:3: <seg> without its closing </seg>"):
        read_sgm(tmp_path / "open.sgm")
    (tmp_path / "bad.sgm").write_bytes(b'<doc>\n<seg id="1">caf\xe9</seg>\n</doc>\n')
    with pytest.raises(InputError, match=r"bad.sgm:2: invalid UTF-8"):
        read_sgm(tmp_path / "bad.sgm")
    (tmp_path / "none.sgm").write_text("<doc></doc>\n")
    with pytest.raises(InputError, match=r"none.sgm: no <seg> segments"):
        read_sgm(tmp_path / "none.sgm")


@pytest.mark.parametrize("sgm, plain, lines", [
    ("newstest2012-src.en.sgm", "newstest2012/newstest2012.en", 3003),
    ("newstest2012-ref.fr.sgm", "newstest2012/newstest2012.fr", 3003),
    ("newstest2013-src.en.sgm", "newstest2013/newstest2013.en", 3000),
    ("newstest2013-ref.fr.sgm", "newstest2013/newstest2013.fr", 3000),
    ("newstest2014-fren-src.en.sgm", "newstest2014/newstest2014.en", 3003),
    ("newstest2014-fren-ref.fr.sgm", "newstest2014/newstest2014.fr", 3003),
])
def test_real_sgm_gives_the_plain_text_exactly(shared_data, sgm, plain, lines):
    segments = read_sgm(shared_data / "sgm" / sgm)
    assert len(segments) == lines
    assert segments == read_lines(shared_data / plain)
