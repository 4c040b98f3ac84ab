import streamlit as st

st.title("mcap: memory-centric partitioning")
st.write("The dashboard is being built; see the README for the command line.")
