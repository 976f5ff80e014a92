module autotune/echo

go 1.25
