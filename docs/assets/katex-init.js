// Typeset the math that pymdownx.arithmatex (generic mode) leaves as \( \) and \[ \] spans,
// on the first load and after every instant navigation of the Material theme.
document$.subscribe(({ body }) => {
  renderMathInElement(body, {
    delimiters: [
      { left: "$$", right: "$$", display: true },
      { left: "$", right: "$", display: false },
      { left: "\\(", right: "\\)", display: false },
      { left: "\\[", right: "\\]", display: true },
    ],
    throwOnError: false,
  });
});
