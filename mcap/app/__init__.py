"""The dashboard's service layer: jobs, background searches, caches that outlive a page
run. Never imports streamlit; pages/ call it and draw."""
