"""Item verdicts under registered rules: the item registry (`registry`, `protocols/items.json`),
the criteria's item marks (`marks`), the readings of criteria, parts and items (`readings`), the
verdict under each alternative (`alternatives`) and the links between items (`links`).
`implicit_em.report.judging.item_verdicts` puts them together."""
