package main

import (
	"encoding/json"
	"fmt"
	"text/tabwriter"

	"github.com/urfave/cli/v2"

	"github.com/shaper-dev/shaper/internal/cmdline"
)

// maxLimit is the largest page the shaper's listings answer.
const maxLimit = 1000

// pageFlags are the flags of a listing: a page's size, where it starts,
// every page, JSON.
func pageFlags() []cli.Flag {
	return []cli.Flag{
		&cli.IntFlag{Name: "limit", Value: 100, Usage: fmt.Sprintf("at most this many a page (1 to %d)", maxLimit)},
		&cli.StringFlag{Name: "after", Usage: "list the page after this cursor (the one a listing printed last)"},
		&cli.BoolFlag{Name: "all", Usage: "follow every page to the last"},
		&cli.BoolFlag{Name: "json", Usage: "print JSON"},
	}
}

// listing is one listing command's way with its items of type T.
type listing[T any] struct {
	cmd    string                                  // "dead list", for errors and the hint
	what   string                                  // "dead letter", counted
	page   func(after string) ([]T, string, error) // one page and the next's cursor
	header string                                  // the table's header, tab-separated
	row    func(T) string                          // one item's row, tab-separated
	json   func(items []T, next string) any        // the JSON printed
}

// run lists the page the flags ask for, or with --all every page from it
// on, as a table (or JSON), says how many on stderr, and without --all
// where the next page starts, when there is one.
func (l listing[T]) run(c *cli.Context) error {
	limit := c.Int("limit")
	if limit < 1 || limit > maxLimit {
		return cli.Exit(fmt.Sprintf("shaper %s: --limit %d: want a number from 1 to %d", l.cmd, limit, maxLimit), cmdline.ExitUsage)
	}
	var items []T
	after := c.String("after")
	for {
		page, next, err := l.page(after)
		if err != nil {
			return apiError(err, l.cmd)
		}
		items = append(items, page...)
		after = next
		if next == "" || !c.Bool("all") {
			break
		}
	}
	if c.Bool("json") {
		if items == nil {
			items = []T{}
		}
		if err := json.NewEncoder(c.App.Writer).Encode(l.json(items, after)); err != nil {
			return err
		}
	} else {
		tw := tabwriter.NewWriter(c.App.Writer, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, l.header)
		for _, it := range items {
			fmt.Fprintln(tw, l.row(it))
		}
		tw.Flush()
	}
	fmt.Fprintln(c.App.ErrWriter, plural(len(items), l.what))
	if after != "" {
		fmt.Fprintf(c.App.ErrWriter, "more: the next page is shaper %s --after %s (same filters), or --all for every page\n", l.cmd, after)
	}
	return nil
}
