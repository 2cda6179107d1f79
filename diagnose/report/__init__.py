"""Rendering reports: text (rich) and JSON; HTML and TensorBoard come later."""
