"""Present: a dataset's story for teammates in four figures with the numbers that matter
(mCAP's split vs an even one, its pick vs the baselines, predicted vs measured, the error
histogram), and the same as one self-contained HTML report (mcap.figures.story)."""
from datetime import date

import streamlit as st

from mcap.core.errors import McapError
from mcap.figures import story as fig_story
from pages._accuracy import show_accuracy
from pages._search import current_predictor
from pages._ranks import one_stage_only
from pages._shared import (
    caption_of, chart, current, dataset_name, error, profile_param, restore_url, sweep_for)

restore_url()
st.title("Present")
profile = current("profile")
sweep = sweep_for(profile, current("sweep", required=False))
st.caption(caption_of(profile))
name = dataset_name("profile") + ("" if sweep is None else " · " + dataset_name("sweep"))
one_stage_only(profile, "Present's story")


@st.cache_resource(show_spinner=False, max_entries=8)  # read only: no copy of its runs
def _story(profile_ref: str, sweep_ref, predictor: str, today, _profile, _sweep):
    return fig_story.story(_profile, _sweep, predictor,
                           (dataset_name("profile"), sweep_ref or ""), today)


try:
    s = _story(profile_param(), None if sweep is None else dataset_name("sweep"),
               current_predictor(), date.today(), profile, sweep)
except McapError as exc:
    error(exc)
    st.stop()
st.subheader(s.headline())  # the sentence a room reads first, from the data
figures = fig_story.draw_story(s, name)
# Built when clicked (a deferred download): the report inlines plotly.js (about 5 MB).
show_accuracy(profile, sweep)
st.download_button("⬇️ All figures as one HTML report (works offline)",
                   lambda: fig_story.report_html(s, figures),
                   file_name="mcap-report.html", mime="text/html", key="present-report")
# One a row, as wide as the page: in two columns at 1280 px their titles were cut off
# ("…every measured partitionin", issue 40 item 13), and a room sees them larger.
for i, fig in enumerate(figures):
    chart(fig, key=f"present-{i}", name=f"story-{i + 1}")
st.table({"what": [k for k, _ in s.numbers()], "value": [v for _, v in s.numbers()]})
