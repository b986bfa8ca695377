"""The keras_gradmon dashboard inside TensorBoard (a dynamic plugin): a
heatmap of the per-variable numbers of each run, the layer detail, the
alerts as incidents and the report's health line. See docs/dashboard.md.

`plugin` holds the TensorBoard plugin and its loader, `reading` what is read
through TensorBoard's data provider, `health` the report's verdict; nothing
else in keras_gradmon imports this package.
"""
